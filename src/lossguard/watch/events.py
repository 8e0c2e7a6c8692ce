"""What ``lossguard watch`` tells its user: one :class:`WatchEvent` per thing worth a line.

The engine (:mod:`.engine`) produces them; the printers and hooks (:mod:`.alerts`) turn them into
text, JSON lines, commands and webhook posts. Words for incidents and plans come from
:mod:`lossguard.report.words`, so ``watch`` and ``analyze`` say the same thing.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..classify.incident import Incident, IncidentKind
from ..jsonsafe import strict_json
from ..plan import RecoveryPlan


class EventKind(str, Enum):
    """The kinds of line ``watch`` prints. The value is the ``"event"`` field of ``--json``."""

    ALERT = "alert"
    """Provisional, within one poll of the line: a loss point far outside its band (a spike has
    begun) or a non-finite value. The incident follows once it is decided."""
    INCIDENT = "incident"
    """An incident, decided: it will be in ``analyze``'s report of the finished log."""
    UPDATE = "update"
    """An incident already printed changed kind (e.g. a spike that did not recover)."""
    WITHDRAWN = "withdrawn"
    """An incident already printed is no longer found (a later, larger event explains it)."""
    NOTICE = "notice"
    """Something about the files: a new file, a rotation, a half-written record."""
    STALLED = "stalled"
    """No file of the run has grown for the idle time: the writer stopped (or hangs)."""
    RUN_STATE = "run_state"
    """Sweep mode: one run's state changed (one line per run)."""
    SUMMARY = "summary"
    """The last line: what was followed and found."""


@dataclass
class WatchEvent:
    """One line of ``watch`` output.

    Attributes:
        kind: what the line is.
        run: the run it is about (its path as given).
        step: the step it concerns (the incident's onset, the alert's step), or None.
        message: the line in words.
        incident: the incident (INCIDENT / UPDATE / WITHDRAWN).
        plan: the recovery plan for it, as ``analyze`` makes it.
        previous_kind: the kind printed before (UPDATE).
        data: extra JSON-ready facts (alert statistics, summary counts).
        time: Unix time the event was produced.
    """

    kind: EventKind
    run: str
    step: int | None = None
    message: str = ""
    incident: Incident | None = None
    plan: RecoveryPlan | None = None
    previous_kind: IncidentKind | None = None
    data: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        """One JSON object (strict JSON: non-finite numbers become null)."""
        return strict_json({
            "event": self.kind.value, "run": self.run, "step": self.step, "message": self.message,
            "time": round(self.time, 3),
            "incident": self.incident.to_dict() if self.incident is not None else None,
            "plan": self.plan.to_dict() if self.plan is not None else None,
            "previous_kind": self.previous_kind.value if self.previous_kind is not None else None,
            **({"data": self.data} if self.data else {}),
        })

