"""Analysis: the result of reading a run and naming what happened to it, and :func:`analyze`.

``analyze(log)`` stitches the run if needed, runs every detector (:mod:`lossguard.detect`), turns
events into incidents (:mod:`lossguard.classify`) and suggests a recovery for each
(:mod:`lossguard.plan`). :meth:`Analysis.to_dict` is the versioned JSON document that
``lossguard analyze --json`` prints; its schema is documented in ``docs/analysis-json.md``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from .version import __version__
from .classify.assemble import find_incidents
from .classify.incident import Incident, IncidentKind
from .classify.settings import AnalyzeConfig
from .jsonsafe import strict_json
from .plan import PlanConfig, RecoveryPlan, findings, make_plans
from .recovery.severity import Severity
from .runlog import RunLog
from .stitch import stitch

if TYPE_CHECKING:
    from .simulate import Simulation

SCHEMA_VERSION = 3
"""Version of the JSON document written by ``lossguard analyze --json``; bumped on breaking change
(2: plans use the recovery core's words -- ``action`` ``"halt"`` instead of ``"stop"``,
``skip_batches`` half-open ``[start, stop)``, ``settings.plan.recipe``; 3: plans are the guard's policy's
decisions, replayed: ``step``, ``decisions``, ``skipped_steps``; see docs/analysis-json.md)."""


@dataclass
class Analysis:
    """Everything ``lossguard analyze`` found in one run.

    Attributes:
        log: the stitched run.
        incidents: what happened, in onset order.
        plans: recovery suggestions; ``plan.incident`` indexes ``incidents``.
        guard_actions: the guard's own decisions read from the log (``RunLog.events``), if any.
        settings: the detector settings used (JSON-ready), so a result can be reproduced.
        metric: the loss series the analysis is about.
        log_interval: typical steps between logged points.
        checkpoints: checkpoint steps the plans were made against (None if not given).
        notes: remarks about the run as a whole (e.g. a loss centred at zero).
    """

    log: RunLog
    incidents: list[Incident]
    plans: list[RecoveryPlan] = field(default_factory=list)
    guard_actions: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    metric: str = "loss"
    log_interval: int = 1
    checkpoints: list[int] | None = None
    notes: list[str] = field(default_factory=list)
    replay: "Simulation | None" = None
    """The guard's policy replayed over the log (:func:`guard_replay`), or None (no single loss)."""

    def of_kind(self, *kinds: IncidentKind | str) -> list[Incident]:
        """Incidents of the given kinds (members or their string values)."""
        want = {IncidentKind(k) for k in kinds}
        return [i for i in self.incidents if i.kind in want]

    @property
    def worst_severity(self) -> Severity | None:
        """The worst incident's :class:`Severity` (a ``str`` enum: compares equal to ``"critical"``...),
        or None when nothing was found."""
        return Severity.worst(i.severity for i in self.incidents)

    def to_dict(self) -> dict[str, Any]:
        """The versioned JSON document (see ``docs/analysis-json.md``)."""
        counts: dict[str, int] = {}
        for i in self.incidents:
            counts[i.kind.value] = counts.get(i.kind.value, 0) + 1
        return strict_json({
            "schema_version": SCHEMA_VERSION,
            "lossguard_version": __version__,
            "run": self.log.summary(),
            "metric": self.metric,
            "log_interval": self.log_interval,
            "checkpoints": self.checkpoints,
            "summary": {"incidents": len(self.incidents), "by_kind": counts, "worst_severity": self.worst_severity},
            "incidents": [i.to_dict() for i in self.incidents],
            "plans": [p.to_dict() for p in self.plans],
            "guard_actions": self.guard_actions,
            "notes": self.notes,
            "settings": self.settings,
        })



def analyze(log: RunLog, *, checkpoints: Sequence[int] | None = None, settings: AnalyzeConfig | None = None,
            plan: PlanConfig | None = None) -> Analysis:
    """Find, classify and plan for every incident of a run.

    Args:
        log: the run (stitched or not; it is stitched here if needed).
        checkpoints: steps of the checkpoints that exist; plans roll back to the newest one at least
            ``plan.recipe.rollback_distance`` before an incident (without it, plans name the step to look for).
        settings: detector and classifier thresholds (defaults are scale-free).
        plan: the recovery recipe's numbers.

    Returns:
        The :class:`Analysis`.

    Raises:
        LossguardError: the log has no loss (or no metric named ``settings.metric``).
    """
    settings = settings or AnalyzeConfig()
    plan = plan or PlanConfig()
    log = stitch(log)
    found = find_incidents(log, settings)
    ck = sorted(int(c) for c in checkpoints) if checkpoints is not None else None
    replay = guard_replay(log, found.metric, found.incidents, plan, ck)
    return Analysis(
        log=log, incidents=found.incidents,
        plans=make_plans(found.incidents, replay.decisions if replay else [], checkpoints_known=ck is not None),
        guard_actions=[dict(e) for e in log.events], settings={"analyze": settings.to_dict(), "plan": _plan_dict(plan)},
        metric=found.metric, log_interval=found.interval, checkpoints=ck, notes=found.notes, replay=replay)


def guard_replay(log: RunLog, metric: str | None, incidents: Sequence[Incident], plan: PlanConfig,
                 checkpoints: Sequence[int] | None) -> "Simulation | None":
    """The guard's policy replayed over the log with the analyser's whole-log findings: the decisions
    the plans are made of (the same call ``lossguard simulate`` makes). None when the log has no
    single loss series to replay."""
    if metric is None or metric not in log.series:
        return None
    from .simulate import simulate  # imported on use: `import lossguard` stays light

    return simulate(log, plan.guard_config(), checkpoints=checkpoints, metric=metric, findings=findings(incidents))


def _plan_dict(plan: PlanConfig) -> dict[str, Any]:
    from dataclasses import asdict
    return asdict(plan)
