"""Severity: how bad an incident is. One ordering, defined once, used by the analyser and its reports."""
from __future__ import annotations

import enum


class Severity(str, enum.Enum):
    """Severity of an incident; the value is the string used in JSON and on the command line.

    Members compare by badness (``Severity.INFO < Severity.WARNING < Severity.CRITICAL``), and a
    plain string value can be turned into a member with ``Severity("warning")``.
    """

    INFO = "info"
    """Worth knowing; no action needed."""
    WARNING = "warning"
    """Something went wrong and recovered or may need attention."""
    CRITICAL = "critical"
    """The run was damaged: a rollback or a stop is advised."""

    def __str__(self) -> str:
        return self.value

    @property
    def rank(self) -> int:
        """0 for INFO, 1 for WARNING, 2 for CRITICAL."""
        return _RANK[self]

    def __lt__(self, other: object) -> bool:
        return self.rank < Severity(other).rank

    def __le__(self, other: object) -> bool:
        return self.rank <= Severity(other).rank

    def __gt__(self, other: object) -> bool:
        return self.rank > Severity(other).rank

    def __ge__(self, other: object) -> bool:
        return self.rank >= Severity(other).rank

    @classmethod
    def worst(cls, values) -> "Severity | None":
        """The worst of ``values`` (members or their strings); None when empty."""
        members = [cls(v) for v in values]
        return max(members, key=lambda s: s.rank) if members else None


_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}

SEVERITIES = tuple(s.value for s in Severity)
"""The severity strings from least to most severe."""
