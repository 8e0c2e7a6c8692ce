"""Decision: one thing the policy decided, with the reasons and the numbers behind it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .action import Action


@dataclass
class Decision:
    """One decision of the policy.

    Attributes:
        action: what to do.
        step: the step it was decided at.
        reasons: why, in words.
        numbers: the figures behind it (JSON-ready), written into the event record. A rollback's
            ``skip_batches`` is a half-open ``[start, stop)`` pair (see :class:`SkipRange`).
    """

    action: Action
    step: int
    reasons: list[str] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The JSONL event record: ``{"step", "event", "reasons", ...numbers}``."""
        rec: dict[str, Any] = {"step": self.step, "event": self.action.value}
        if self.reasons:
            rec["reasons"] = list(self.reasons)
        rec.update(self.numbers)
        return rec
