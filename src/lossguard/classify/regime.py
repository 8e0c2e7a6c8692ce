"""The regime pass: a lasting change of the loss's noise (and level), or a loss stuck at exactly zero.

Both say the same thing to the person reading: the data or the loss changed underneath the run.
A regime change found by :func:`lossguard.detect.regime.find_regime_changes` takes over the spikes
inside it (each swing of a noisier regime passes the point test, but "five fast spikes, nothing to
do" is the wrong story); one at a resume belongs to the resume, and one inside a span that repeated
data explains is that repeated data.
"""
from __future__ import annotations

import numpy as np

from ..detect.regime import D2_TO_SIGMA, RegimeChange, find_regime_changes
from ..recovery.severity import Severity
from .context import Context, overlap
from .incident import Incident, IncidentKind as K

ZERO_RUN_POINTS = 2
"""Consecutive logged values of exactly 0.0 (after a non-zero loss) that make a zero-loss regime."""
MIN_SIDE_POINTS = 8
"""Points each side of a loss incident needed to compare the noise before and after it."""
SETTLE_POINTS = 2
"""The noise after an incident is measured from this many points past its jump (not the jump itself):
past its peak when the peak is within :data:`MIN_SIDE_POINTS` of the onset, else past the onset (the
largest value of a noisier regime can be anywhere in it, and a divergence peaks at the log's end)."""
MIN_WINDOW = 32
"""Shortest window of the regime test on a short log (the outlier window, or a fifth of the log)."""
UNRECOVERED = frozenset({K.LEVEL_SHIFT, K.SPIKE_NO_RECOVERY, K.DIVERGENCE})
"""Loss incidents that leave the curve on a new level, which a noisier tail makes a regime change."""
BOUNDARY_WINDOWS = 2
"""A change within this many resume windows (``resume.level_points``) of a resume belongs to it."""
PLAN_HINT = ("check the data pipeline (shards, mix, tokenisation, sample masking) and the loss (reduction, "
             "masking, a term that vanished) at that step before training on")


def _regime_incident(ctx: Context, r: RegimeChange, w: int) -> Incident:
    x = ctx.ev.values
    span = x[r.onset:r.onset + 2 * w]
    peak = r.onset + int(np.argmax(np.abs(span - r.level_before)))
    change = r.level_after - r.level_before
    rel = change / abs(r.level_before) if r.level_before else float("inf")
    direction = ("suspiciously downward: a loss that is suddenly better than its own trend is more likely a data "
                 "or loss bug than learning" if rel < -ctx.cfg.shift.rel else
                 "upward" if rel > ctx.cfg.shift.rel else "at about the same level")
    evidence = (f"From step {ctx.step(r.onset)} the {ctx.metric} left its level {r.level_before:.4g}: its noise is "
                f"{r.ratio:.1f}x larger relative to its level over the next {2 * w} points (sigma "
                f"{r.noise_before:.3g} -> {r.noise_after:.3g}) and its median is {r.level_after:.4g} ({rel:+.0%}), "
                f"{direction}. A lasting change of regime, not a series of spikes: {PLAN_HINT}.")
    end = None if r.end is None else ctx.step(r.end)
    return Incident(kind=K.REGIME_CHANGE, metric=ctx.metric, onset=ctx.step(r.onset), peak=ctx.step(peak), end=end,
                    baseline=r.level_before, peak_value=r.level_after, magnitude=change,
                    magnitude_sigma=change / r.noise_before if r.noise_before > 0 else float("inf"),
                    streams=ctx.streams, severity=Severity.CRITICAL, evidence=evidence,
                    details={"noise_ratio": r.ratio, "noise_before": r.noise_before, "noise_after": r.noise_after,
                             "level_after": r.level_after, "relative": rel, "test": "noise regime"})


def _zero_loss(ctx: Context) -> Incident | None:
    """A loss that becomes exactly 0.0 after a non-zero value: not a training loss any more."""
    x = ctx.ev.values
    zero = x == 0.0
    if zero.sum() < ZERO_RUN_POINTS or not (~zero).any():
        return None
    first_nonzero = int(np.argmax(~zero))
    runs = np.flatnonzero(np.convolve(zero[first_nonzero:].astype(np.int64), np.ones(ZERO_RUN_POINTS, np.int64),
                                      "valid") == ZERO_RUN_POINTS)
    if not len(runs):
        return None
    a = first_nonzero + int(runs[0])
    level = float(np.median(x[first_nonzero:a])) if a > first_nonzero else float("nan")
    n = int(zero[a:].sum())
    evidence = (f"The {ctx.metric} is exactly 0.0 at {n} logged point(s) from step {ctx.step(a)} (before: "
                f"{level:.4g}). No training loss is exactly zero: the loss was masked out, "
                f"reduced over an empty batch, or replaced after an overflow; {PLAN_HINT}.")
    return Incident(kind=K.REGIME_CHANGE, metric=ctx.metric, onset=ctx.step(a), peak=ctx.step(a), end=None,
                    baseline=level, peak_value=0.0, magnitude=-level, magnitude_sigma=float("-inf"),
                    streams=ctx.streams, severity=Severity.CRITICAL, evidence=evidence,
                    details={"zero_points": n, "test": "exact zero"})


def _relative_noise(x: np.ndarray) -> float:
    """Robust sigma from second differences, over the median level (NaN with too few points)."""
    if len(x) < MIN_SIDE_POINTS:
        return float("nan")
    level = float(np.median(x))
    sigma = D2_TO_SIGMA * float(np.median(np.abs(x[2:] - 2 * x[1:-1] + x[:-2])))
    return sigma / abs(level) if level else float("nan")


def _noisier_after(ctx: Context, inc: Incident) -> RegimeChange | None:
    """A loss incident that never came back, with the noise after it ``noise_ratio`` times the noise
    before it (relative to the level each side): the new level is a new regime."""
    x, st, w = ctx.ev.values, ctx.st, ctx.dcfg.outlier.window
    i = int(np.searchsorted(st, inc.onset))
    p = int(np.searchsorted(st, inc.peak))
    settle = (p if p - i <= MIN_SIDE_POINTS else i) + SETTLE_POINTS  # past the jump itself
    before, after = x[max(0, i - w):i], x[settle:settle + 2 * w]
    r0, r1 = _relative_noise(before), _relative_noise(after)
    # The level has already moved (another test found the event), so the only question is which
    # story is nearer: the same noise (ratio 1) or a new regime (the scan's ``noise_ratio``). In
    # log-ratio, the midpoint of the two is sqrt(noise_ratio).
    if not (r0 > 0 and r1 >= np.sqrt(ctx.cfg.regime.noise_ratio) * r0):
        return None
    lb, la = float(np.median(before)), float(np.median(after))
    return RegimeChange(i, None, lb, la, r0 * abs(lb), r1 * abs(la), r1 / r0)


def regime_pass(ctx: Context) -> None:
    """Report regime changes and fold the loss incidents inside them into them."""
    found: list[Incident] = []
    zero = _zero_loss(ctx)
    if zero is not None:
        found.append(zero)
    # A level that moved and stayed (a shift, a spike that never came back, a climb) with the noise
    # multiplied after it is one regime change, not a shift plus a noisier curve.
    for inc in [i for i in ctx.incidents if i.metric == ctx.metric and i.end is None and i.kind in UNRECOVERED]:
        r = _noisier_after(ctx, inc)
        if r is not None:
            ctx.incidents.remove(inc)
            found.append(_regime_incident(ctx, r, ctx.dcfg.outlier.window))
            found[-1].details["was"] = inc.kind.value
    n = len(ctx.ev.values)
    w = min(ctx.dcfg.outlier.window, max(MIN_WINDOW, n // (ctx.cfg.regime.start_windows + 3)))
    for r in find_regime_changes(ctx.ev.values, w, ctx.cfg.regime):
        if any(abs(ctx.step(r.onset) - f.onset) <= w * ctx.interval for f in found):
            continue
        a, z = ctx.step(r.onset - w), ctx.step(r.onset + w)
        if ctx.claims.covers(a, z, events=False) or \
                ctx.boundary_near(r.onset, BOUNDARY_WINDOWS * ctx.cfg.resume.level_points) is not None:
            continue  # repeated data or a resume explains it
        found.append(_regime_incident(ctx, r, w))
    for inc in found:
        last = ctx.step(len(ctx.ev.values) - 1) if inc.end is None else inc.end
        inside = [i for i in ctx.incidents if i.metric == ctx.metric and i.kind in
                  (K.SPIKE_FAST, K.SPIKE_SLOW, K.SPIKE_NO_RECOVERY, K.LEVEL_SHIFT, K.DIVERGENCE, K.SUDDEN_DROP)
                  and overlap(i.onset, i.onset, inc.onset - w * ctx.interval // 4, last)]
        if inside:
            inc.details["folded"] = [{"kind": i.kind.value, "onset": i.onset, "peak": i.peak} for i in inside]
            inc.evidence += (f" Inside it, {len(inside)} excursion(s) that the point tests alone would report "
                             f"separately (first at step {inside[0].peak}).")
            ctx.incidents[:] = [i for i in ctx.incidents if all(i is not j for j in inside)]
        ctx.incidents.append(inc)
        ctx.claims.events.append((inc.onset, last))
