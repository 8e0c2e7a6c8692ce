"""Passes at segment boundaries (resumes and rollbacks): repeated data, and resume spikes.

Repeated data runs first: the dip it makes and the step back up to fresh data are claimed, so the
later passes do not call them a drop, a spike or a level shift. Resume spikes run after the spike
pass: a boundary whose first points a spike already covers is not tested again.
"""
from __future__ import annotations

import numpy as np

from ..detect.resume import dead_vs_live, repeated_after, repeated_ids, resume_spike
from ..recovery.resume_watch import repeated_data_decided_at
from ..recovery.severity import Severity
from .context import Context
from .incident import Incident, IncidentKind as K

DEAD_GAP_SE = 3.0
"""A live pass below the superseded first pass counts when the median gap exceeds this many standard
errors of the matched differences..."""
DEAD_GAP_SPREAD = 1.5
"""...and this many spreads of them (a consistent gap, not one first-pass spike the rollback erased)..."""
DEAD_GAP_REL = 0.01
"""...and this fraction of the level."""


def _dead_gap(ctx: Context, seg: int, kind: str) -> dict | None:
    """The live-vs-superseded comparison after a rollback when it shows a consistent gap, else None."""
    if kind != "rollback":
        return None
    dl = dead_vs_live(ctx.log, ctx.metric, seg)
    if dl is None:
        return None
    need = max(DEAD_GAP_SE * dl["spread"] / np.sqrt(dl["matched"]), DEAD_GAP_SPREAD * dl["spread"],
               DEAD_GAP_REL * abs(dl["level"]))
    return dl if dl["median_diff"] > need else None


def repeated_data_pass(ctx: Context) -> None:
    """Repeated data after a resume (a dip below the extrapolated trend), and repeated sample ids."""
    ev = ctx.ev
    for seg, b, kind in ctx.boundaries:
        f = repeated_after(ev.values, b, seg, ctx.cfg.resume)
        dl = _dead_gap(ctx, seg, kind)
        if f is None:
            # A live pass below the first pass alone is also what a rollback over a spike looks like
            # (the first pass was the elevated one). Repeated data must also sit below the trend.
            if dl is not None:
                ctx.notes.append(
                    f"The rollback to step {dl['first_step']} replaced a first pass that ran {dl['median_diff']:.3g} "
                    f"higher over steps {dl['first_step']}-{dl['last_step']} (superseded points are not analysed): "
                    "the rollback removed an excursion.")
            continue
        evidence = []
        if dl is not None:
            evidence.append(f"after the rollback the live loss is {dl['median_diff']:.3g} below the first pass over "
                            f"the same {dl['matched']} steps ({dl['first_step']}-{dl['last_step']})")
        evidence += f.evidence
        ctx.incidents.append(Incident(
            kind=K.REPEATED_DATA, metric=ctx.metric, onset=ctx.step(b), peak=ctx.step(f.peak),
            end=None if f.end is None else ctx.step(f.end), baseline=f.level, peak_value=float(ev.values[f.peak]),
            magnitude=f.excess, magnitude_sigma=f.excess / f.noise if f.noise > 0 else float("-inf"),
            streams=ctx.streams, severity=Severity.WARNING,
            evidence="The data stream seems to have restarted at the resume: " + "; ".join(evidence) + ".",
            details={"segment": seg, "dead_vs_live": dl, **f.details,
                     # where the level test has all its points: a live guard decides there too
                     "decided_at": ctx.step(repeated_data_decided_at(b, ctx.cfg.resume))}))
        ctx.claims.repeated.add(b)
        if f.end is not None:  # the step back up to fresh data is part of this incident, not a spike
            h = ctx.cfg.resume.level_points
            ctx.claims.explained.append((ctx.step(f.end - 2 * h), ctx.step(f.end + ctx.dcfg.outlier.window)))
            ctx.claims.quiet.append((ctx.step(b), ctx.step(f.end) + 2 * ctx.lag * ctx.interval))
    for name, first, count in repeated_ids(ctx.log):
        ctx.incidents.append(Incident(
            kind=K.REPEATED_DATA, metric=name, onset=first, peak=first, end=None, baseline=float("nan"),
            peak_value=float("nan"), magnitude=float(count), magnitude_sigma=float("nan"), severity=Severity.WARNING,
            evidence=f"{count} steps saw a {name} that an earlier step had already seen, first at step {first}.",
            details={"repeats": count}))


def resume_spike_pass(ctx: Context) -> None:
    """A bump in the first points after a resume that no spike incident already covers."""
    ev = ctx.ev
    for seg, b, _ in ctx.boundaries:
        if b in ctx.claims.resumed or ctx.claims.covers(ctx.step(b), ctx.step(b), explained=False, quiet=False):
            continue
        f = resume_spike(ev.values, b, seg, ctx.cfg.resume)
        if f is None:
            continue
        end = None if f.end is None else ctx.step(f.end)
        ctx.incidents.append(Incident(
            kind=K.RESUME_SPIKE, metric=ctx.metric, onset=ctx.step(f.onset), peak=ctx.step(f.peak), end=end,
            baseline=f.level, peak_value=f.level + f.excess, magnitude=f.excess, magnitude_sigma=f.excess / f.noise,
            recovery_steps=None if end is None else end - ctx.step(f.peak), streams=ctx.streams, severity=Severity.INFO,
            evidence=f"The {ctx.metric} rose " + f.evidence[0] + ".", details=f.details))
        ctx.claims.events.append((ctx.step(f.onset), ctx.step(f.end if f.end is not None else f.peak)))
