"""What the pictures say in words: incident names and colours, the one-line headline, plans as sentences.

Shared by the HTML and PNG reports so that both name and colour things the same way; :func:`health`
sorts the incidents for the terminal summary and says whether the run is healthy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import metrics as M
from ..analysis import Analysis
from ..classify.incident import Incident, IncidentKind as K
from ..plan import RecoveryPlan
from ..recovery import Action, Severity, SkipRange

KIND_STYLE: dict[K, tuple[str, str]] = {
    # kind: (name in a sentence, colour). Warm colours for "the loss went up", cool ones for
    # "something about the data or the resume", so the eye sorts them before reading.
    K.SPIKE_FAST: ("fast-recovering spike", "#f2a900"),
    K.SPIKE_SLOW: ("slow-recovering spike", "#ef6c00"),
    K.SPIKE_NO_RECOVERY: ("non-recovering spike", "#d50000"),
    K.DIVERGENCE: ("divergence", "#8e0000"),
    K.LEVEL_SHIFT: ("level shift", "#9e9d24"),
    K.SUDDEN_DROP: ("sudden drop", "#2e7d32"),
    K.RESUME_SPIKE: ("resume spike", "#00897b"),
    K.REPEATED_DATA: ("repeated data after resume", "#6d4c41"),
    K.STREAM_SPIKE: ("spike in one data stream", "#ad1457"),
    K.NON_FINITE: ("NaN/Inf", "#6a1b9a"),
    K.LOSS_SCALE_COLLAPSE: ("fp16 loss-scale collapse", "#4527a0"),
    K.GRAD_NORM_SPIKE: ("grad-norm spike", "#e57373"),
    K.REGIME_CHANGE: ("change of regime", "#37474f"),
    K.STALL: ("stall", "#5d4037"),
    K.UPDATES_STOPPED: ("stretch without updates", "#263238"),
}
"""Every incident kind's name (as used in a sentence) and its colour in charts and legends."""

_PLURAL = {K.REPEATED_DATA: "resumes onto repeated data", K.NON_FINITE: "NaN/Inf steps",
           K.STREAM_SPIKE: "spikes in one data stream", K.LOSS_SCALE_COLLAPSE: "fp16 loss-scale collapses",
           K.REGIME_CHANGE: "changes of regime", K.UPDATES_STOPPED: "stretches without updates"}


def kind_label(kind: K) -> str:
    """The kind's name as used in a sentence (``"slow-recovering spike"``)."""
    return KIND_STYLE[kind][0]


def _num(v: float) -> str:
    return "n/a" if not math.isfinite(v) else f"{v:.4g}"


def magnitude(inc: Incident) -> str:
    """How bad, in the form an engineer compares runs by: ``2.3x``, ``NaN``, ``scale 65536 -> 1``."""
    if inc.kind is K.NON_FINITE:
        return "NaN" if math.isnan(inc.peak_value) else ("Inf" if math.isinf(inc.peak_value) else "non-finite")
    if inc.kind is K.UPDATES_STOPPED:
        return f"{inc.details.get('steps', '?')} steps"
    if inc.kind is K.LOSS_SCALE_COLLAPSE:
        return f"scale {_num(inc.baseline)} \u2192 {_num(inc.peak_value)}"
    if not (math.isfinite(inc.baseline) and math.isfinite(inc.peak_value)):
        return f"{_num(inc.peak_value)} vs {_num(inc.baseline)}"
    if inc.baseline > 0 and inc.peak_value > 0:
        ratio = inc.peak_value / inc.baseline
        if ratio >= 1.5:
            return f"{ratio:.1f}x"
        if ratio > 1:
            return f"+{(ratio - 1) * 100:.0f}%"
        return f"\u2212{(1 - ratio) * 100:.0f}%"
    return f"{_num(inc.peak_value)} vs {_num(inc.baseline)}"


def incident_summary(inc: Incident) -> str:
    """One phrase: ``"slow-recovering spike at 31216 (2.3x)"``, naming the metric unless it is the loss."""
    if inc.kind is K.NON_FINITE:  # "NaN grad_norm at 15000" says it all
        return f"{magnitude(inc)} {inc.metric} at {inc.peak}"
    on = "" if inc.metric == "loss" else f" in {inc.metric}"
    return f"{kind_label(inc.kind)}{on} at {inc.peak} ({magnitude(inc)})"


def _badness(inc: Incident) -> tuple[int, int]:
    """Sort key: worst severity first, then by onset."""
    return (-Severity(inc.severity).rank, inc.onset)


def skip_phrase(skip: SkipRange) -> str:
    """A half-open skip range ``[a, b)`` in words that cannot be read as inclusive of ``b``:
    ``"batch 2900"``, ``"batches 2900 to 3300 (401 batches)"``."""
    a, b = skip
    if b - a <= 0:
        return "no batches"
    if b - a == 1:
        return f"batch {a}"
    return f"batches {a} to {b - 1} ({b - a} batches)"


def judged_limits(analysis: Analysis):
    """``(points, limits)``: the finite points of the analysed loss and what the log is too short to
    judge (:func:`lossguard.classify.short.limits`; every test when the loss is missing)."""
    from ..classify.settings import AnalyzeConfig
    from ..classify.short import limits

    series = analysis.log.series
    points = int(np.isfinite(analysis.log.live(analysis.metric)[1]).sum()) if analysis.metric in series else 0
    return points, limits(points, analysis.log_interval, AnalyzeConfig(metric=analysis.metric))


def not_judged(analysis: Analysis) -> str | None:
    """The headline of a log with no incident that was too short to judge, as the terminal and the
    reports print it (``"NOT FULLY JUDGED: no incident found in 9 points, but the log is too short to
    judge ..."``); None when there are incidents or the log was long enough."""
    if analysis.incidents:
        return None
    points, short = judged_limits(analysis)
    if not short:
        return None
    from ..classify.short import MIN_JUDGED_POINTS

    if analysis.metric not in analysis.log.series:
        return f"NOT JUDGED: the log has no {analysis.metric}"
    if points < MIN_JUDGED_POINTS:
        return (f"NOT JUDGED: {points} finite {analysis.metric} point(s), too few to judge anything "
                f"(needs {MIN_JUDGED_POINTS})")
    return (f"NOT FULLY JUDGED: no incident found in {points} points, but the log is too short to judge "
            + ", ".join(lim.what for lim in short))


def headline(analysis: Analysis, *, limit: int = 2) -> str:
    """The report's first line: what happened, in one sentence that fits one line.

    The worst incidents come first (critical, then warning, then info; ties by onset), because the
    reader at 3 a.m. acts on those: ``"4 incidents: non-recovering spike at 800000 (3.5x), NaN
    grad_norm at 900000, and 2 more"``.
    """
    incs = analysis.incidents
    log = analysis.log
    unjudged = not_judged(analysis)
    if unjudged:
        return unjudged
    if not incs:
        if M.LOSS in log.series:
            steps, values = log.live(M.LOSS)
            finite = np.flatnonzero(np.isfinite(values))
            if len(finite):
                i, j = finite[0], finite[-1]
                return (f"No incidents: loss {_num(float(values[i]))} \u2192 {_num(float(values[j]))} over steps "
                        f"{int(steps[i])}\u2013{int(steps[j])}")
        return "No incidents found"
    worst = sorted(incs, key=_badness)
    noun = "incident" if len(incs) == 1 else "incidents"
    if len(incs) <= limit:
        return f"{len(incs)} {noun}: " + ", ".join(incident_summary(inc) for inc in worst)
    # Many incidents: one phrase per kind, worst kind first, naming the biggest of each.
    groups: dict[K, list[Incident]] = {}
    for inc in worst:
        groups.setdefault(inc.kind, []).append(inc)
    parts = []
    for kind, members in list(groups.items())[:limit]:
        if len(members) == 1:
            parts.append(incident_summary(members[0]))
            continue
        top = max(members, key=lambda inc: (Severity(inc.severity).rank, _size(inc)))
        plural = _PLURAL.get(kind, kind_label(kind) + "s")
        parts.append(f"{len(members)} {plural} (worst at {top.peak}, {magnitude(top)})")
    if len(groups) == 1:  # "51 fast-recovering spikes (worst at 11879, 1.9x)"
        return parts[0]
    rest = sum(len(m) for m in list(groups.values())[limit:])
    more = f", and {rest} more" if rest else ""
    return f"{len(incs)} {noun}: " + ", ".join(parts) + more


def _size(inc: Incident) -> float:
    """How big an incident is, for picking the worst of a kind (relative excursion, else sigmas)."""
    if math.isfinite(inc.baseline) and math.isfinite(inc.peak_value) and inc.baseline > 0:
        return abs(inc.peak_value / inc.baseline - 1)
    return inc.magnitude_sigma if math.isfinite(inc.magnitude_sigma) else math.inf


def run_facts(analysis: Analysis) -> str:
    """The run in one line: steps, segments (resumes, rollbacks), superseded points, sources."""
    log = analysis.log
    s = log.summary()
    bits = []
    if s["first_step"] is not None:
        bits.append(f"steps {s['first_step']}\u2013{s['last_step']}")
    n = len(log.segments)
    if n > 1:
        bits.append(f"{n} segments ({s['resumes']} resume{'s' * (s['resumes'] != 1)}, "
                    f"{s['rollbacks']} rollback{'s' * (s['rollbacks'] != 1)})")
    if s["dead_points"]:
        bits.append(f"{s['dead_points']} points superseded by rollbacks (drawn faded)")
    if analysis.guard_actions:
        bits.append(f"{len(analysis.guard_actions)} guard actions")
    names = [Path(x).name for x in log.sources]
    if names:
        bits.append(f"{log.format}: " + (", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "")))
    return " \u00b7 ".join(bits)


def describe_plan(plan: RecoveryPlan) -> str:
    """A recovery plan as one instruction: ``"Roll back to step 31000 (...), skip batches ..."``."""
    if plan.action == Action.NONE:
        return "No action needed."
    if plan.action == Action.WATCH:
        return "No action yet: keep watching this run."
    if plan.action == Action.HALT:
        return "Stop the run: there is no checkpoint to roll back to."
    steps: list[str] = []
    if plan.rollback_to_step is not None:
        where = ("checkpoint found" if plan.checkpoint_exists
                 else "use the newest checkpoint at or before this step")
        steps.append(f"{'r' if steps else 'R'}oll back to step {plan.rollback_to_step} ({where})")
    if plan.skip_batches:
        steps.append(f"{'s' if steps else 'S'}kip {skip_phrase(plan.skip_batches)}")
    if plan.lr_factor != 1.0:
        steps.append(f"{'m' if steps else 'M'}ultiply the LR by {plan.lr_factor:g}")
    if plan.reset_loss_scale:
        steps.append(f"{'r' if steps else 'R'}eset the fp16 loss scale")
    if not steps:
        return f"{plan.action.replace('_', ' ').capitalize()}."
    return ", ".join(steps) + "."


ONE_STEP_POINTS = 3
"""A fast spike back on its trend within this many logged points of its peak is a one-step outlier
(a single bad batch), grouped in one line of the terminal summary."""
ONE_STEP_LISTED = 10
"""Steps of one-step outliers listed by name in that line; the rest are counted."""
NO_ACTION = (Action.NONE, Action.WATCH)
"""Plan actions that ask nothing of the reader now."""


@dataclass
class Health:
    """Whether a run needs attention, and its incidents sorted for a person to read.

    Attributes:
        healthy: True when no incident needs action and none is critical.
        headline: one line, ``HEALTHY: ...`` / ``UNHEALTHY: ...`` / ``NOT FULLY JUDGED: ...``.
        act: indices of incidents whose plan asks for action (worst first, then by onset).
        outliers: indices of one-step outliers (fast spikes back within :data:`ONE_STEP_POINTS`).
        other: indices of the remaining incidents (no action needed), by onset.
    """

    healthy: bool
    headline: str
    act: list[int]
    outliers: list[int]
    other: list[int]


def word(value) -> str:
    """The plain word of an enum member (``Action.ROLLBACK`` -> ``"rollback"``) or of a string."""
    return str(getattr(value, "value", value))


def _one_step(inc: Incident) -> bool:
    pts = inc.details.get("points_to_recover")
    return inc.kind is K.SPIKE_FAST and pts is not None and pts <= ONE_STEP_POINTS


def health(analysis: Analysis) -> Health:
    """Sort the incidents for the terminal summary and say, in one line, whether the run is healthy."""
    incs = analysis.incidents
    action = {p.incident: Action(word(p.action)) for p in analysis.plans}
    act = sorted((i for i, inc in enumerate(incs) if action.get(i, Action.WATCH) not in NO_ACTION),
                 key=lambda i: _badness(incs[i]))
    rest = [i for i in range(len(incs)) if i not in act]
    outliers = [i for i in rest if _one_step(incs[i])]
    other = [i for i in rest if i not in outliers]
    critical = any(Severity(incs[i].severity) is Severity.CRITICAL for i in rest)
    # A decision of the guard's policy that no incident explains (plan.incident None) still needs action.
    unexplained = [p for p in analysis.plans if p.incident is None and p.action not in NO_ACTION]
    healthy = not act and not critical and not unexplained
    points, short = judged_limits(analysis)
    if unexplained and not act:
        p = unexplained[0]
        text = (f"UNHEALTHY: the guard's policy would {word(p.action).replace('_', ' ')} at step {p.step} "
                f"({'; '.join(p.reasons[:1])}), with no incident to explain it")
    elif act or critical:
        worst = [incs[i] for i in act] or [incs[i] for i in rest
                                           if Severity(incs[i].severity) is Severity.CRITICAL]
        more = f", and {len(worst) - 2} more" if len(worst) > 2 else ""
        text = (f"UNHEALTHY: {len(worst)} incident(s) need action: "
                + ", ".join(incident_summary(inc) for inc in worst[:2]) + more)
    elif why := not_judged(analysis):
        text = why
    else:
        bits = []
        if outliers:
            bits.append(f"{len(outliers)} one-step outlier(s)")
        if other:
            bits.append(f"{len(other)} finding(s) needing no action")
        text = "HEALTHY: " + (", ".join(bits) + ", nothing to do" if bits else "no incidents") + f" ({points} points)"
        if short:
            text += "; too short to judge " + ", ".join(lim.what for lim in short)
    return Health(healthy, text, act, outliers, other)
