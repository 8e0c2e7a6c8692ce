"""Analysis: the result of reading a run and naming what happened to it.

(Contract only; ``analyze()`` that fills it lives beside it.)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .classify.incident import Incident
from .plan import RecoveryPlan
from .runlog import RunLog

SCHEMA_VERSION = 1
"""Version of the JSON document written by ``lossguard analyze --json``; bumped on breaking change."""


@dataclass
class Analysis:
    """Everything ``lossguard analyze`` found in one run.

    Attributes:
        log: the stitched run.
        incidents: what happened, in onset order.
        plans: recovery suggestions; ``plan.incident`` indexes ``incidents``.
        guard_actions: the guard's own decisions read from the log (``RunLog.events``), if any.
        settings: the detector settings used (JSON-ready), so a result can be reproduced.
    """

    log: RunLog
    incidents: list[Incident]
    plans: list[RecoveryPlan] = field(default_factory=list)
    guard_actions: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
