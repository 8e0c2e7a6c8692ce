"""Short logs: judging from a handful of points, and saying what cannot be judged.

A run that died at step 40 is exactly when someone runs this tool, and an excerpt pasted from a
chat has 3-9 points. The detectors need a noise estimate (``min_points`` points before their first
verdict, a window for a good one); with fewer points :func:`short_pass` applies *relative* rules to
the whole log, the same relative distance the point test uses while its window fills
(``rel_threshold * warmup_rel_factor``, 24% by default):

* **jump**: the loss rises at least that much above the lowest point before its peak, and one step
  carries at least half the rise. A spike, onset at the jump; recovered when a later point is back
  within ``rel_threshold`` of the level before it, fast when that is the next logged point or
  within ``fast_steps`` (a sparse log cannot resolve recovery below its interval); otherwise a
  spike without recovery whose log ends too soon to tell a slow recovery from none; unless the
  rise is no more than the log's own upward swings (:func:`.short_noise.within_swing`);
* **climb**: the same rise over at least three points, no step carrying half of it: a divergence,
  onset at the turn: the foot of the final unbroken rise to the peak when it is back at the level
  of the lowest point before it (swings at that level are not the climb yet), else that lowest point.

The highest point is judged first; then the stretch before the low point it rose from is judged
the same way, and so on: a paste with a recovered spike and a blow-up at its end has two events.

Sudden drops need a longer view: the windowed test of :mod:`lossguard.detect.drop` judges nothing
on a log shorter than its spans, nor before a full window past the LR warm-up. There, from 10
points, **two medians** decide (:func:`_short_drop`): the split with the largest fall from the median
of the points before it to the median of the points after it (each side up to a quarter of the
stretch), a drop when the fall passes the point test's distances with the noise of two medians
(``z_threshold`` standard errors and ``rel_threshold``), is ``steep_ratio`` times what the decline
within the stretch before would make over the same distance (a power-law decline decelerates, so it
never is), and stays down.

:func:`limits` lists what a log is too short to judge at all, and :func:`coverage_notes` says it
in words ("40 points: too short to judge level shifts (needs 640)"): never a bare "no incidents" on
a log that could not be judged.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..detect.drop import MEDIAN_SE
from ..detect.regime import D2_TO_SIGMA
from ..detect.series import DetectorConfig
from ..recovery.severity import Severity
from .context import Context
from .incident import Incident, IncidentKind as K
from .settings import AnalyzeConfig
from .short_noise import STILL_HIGH, sustained, within_swing

RELATIVE_RULE = "short log, relative"
"""``details["rule"]`` of an incident found by the relative rules (whole-log evidence for the policy:
:mod:`lossguard.recovery.finding`)."""
SHORT_LOG_POINTS = 32
"""Below this many finite points (a quarter of the default outlier window) the relative rules judge
the whole log: the detectors' noise estimate from fewer first differences is too rough to trust."""
MIN_JUDGED_POINTS = 3
"""The fewest points the relative rules judge: two to set a level, one to leave it."""
JUMP_SHARE = 0.5
"""A rise is a jump when one step carries at least this share of it, else a climb."""
TURN_SHARE = 0.1
"""A climb's final unbroken rise starts at its turn when its foot is this share of the rise from the low."""
CLIMB_POINTS = 3
"""A climb spans at least this many points (its lowest point and two rising after it)."""
REPLACED = frozenset({K.SPIKE_FAST, K.SPIKE_SLOW, K.SPIKE_NO_RECOVERY, K.DIVERGENCE, K.LEVEL_SHIFT})
"""Detector incidents on the loss that a short-log finding over the same stretch replaces."""
DROP_SIDE_POINTS = 5
"""The short-log drop rule compares medians of at least this many points each side of a fall (a
median of 5 ignores two outliers)."""
FALL_START = 0.25
"""A point already this share of the fall below the level before belongs to the fall (its onset)."""
DROP_SIDE_SHARE = 4
"""...and of at most ``1 / DROP_SIDE_SHARE`` of the log each side: local levels, not the whole log."""


@dataclass(frozen=True)
class Limit:
    """A test the log is too short for.

    Attributes:
        what: the patterns it would find, in words (``"level shifts"``).
        needed: finite points the test needs.
    """

    what: str
    needed: int


def drop_points_needed(d: DetectorConfig) -> int:
    """Finite points the windowed sudden-drop test needs (a slow stretch of ``slow_spans`` spans, the
    span of the fall, and a median)."""
    return (d.drop.slow_spans + 1) * d.drop.span_points + d.drop.smooth_points


def limits(points: int, interval: int, cfg: AnalyzeConfig) -> list[Limit]:
    """The tests a log of ``points`` finite points, logged every ``interval`` steps, is too short for."""
    d: DetectorConfig = cfg.for_interval(interval)
    w, o = d.outlier.window, d.outlier
    q = max(1, w // o.stride)
    need = [
        Limit(f"spikes and climbs under {o.rel_threshold * o.warmup_rel_factor:.0%}", SHORT_LOG_POINTS),
        Limit("slow recoveries", d.spike.fast_points + d.spike.settle + 1),
        Limit("regime changes", 4 * w + 2),
        Limit("sudden drops", min(drop_points_needed(d), 2 * DROP_SIDE_POINTS)),
        Limit("level shifts", w + 4 * q * o.stride + 1),
    ]
    return [lim for lim in need if points < lim.needed]


def coverage_notes(ctx: Context) -> list[str]:
    """One note naming what the log is too short to judge, or nothing."""
    n = len(ctx.ev.values)
    short = limits(n, ctx.interval, ctx.cfg)
    if not short:
        return []
    if n < MIN_JUDGED_POINTS:
        return [f"{n} finite point(s): too short to judge anything."]
    parts = ", ".join(f"{lim.what} (needs {lim.needed} points)" for lim in short)
    return [f"{n} points: too short to judge {parts}."]


def _back(x: np.ndarray, after: int, level: float, rel: float) -> int | None:
    """First index > ``after`` whose value is back within ``rel`` of ``level``, or None."""
    ok = np.flatnonzero(x[after + 1:] <= level + rel * abs(level))
    return after + 1 + int(ok[0]) if len(ok) else None


def _spike(ctx: Context, s: int, stop: int) -> Incident:
    x, st, cfg = ctx.ev.values, ctx.st, ctx.cfg
    base = float(np.median(x[:s]))
    peak = s + int(np.argmax(x[s:stop]))
    rel = (x[peak] - base) / abs(base)
    back = _back(x, peak, base, cfg.detectors.outlier.rel_threshold)
    what = (f"The {ctx.metric} jumped from {base:.4g} to {x[s]:.4g} at step {int(st[s])} and peaked at {x[peak]:.4g} "
            f"(+{rel:.0%}) at step {int(st[peak])}")
    details = {"relative": rel, "rule": RELATIVE_RULE, "points": len(x)}
    if back is not None:
        rec = int(st[back] - st[peak])
        fast = rec <= cfg.fast_steps or back - peak <= 1
        details["points_to_recover"] = back - peak
        evidence = (f"{what}; it was back within {cfg.detectors.outlier.rel_threshold:.0%} of that level at step "
                    f"{int(st[back])} ({back - peak} logged point(s) later).")
        return Incident(kind=K.SPIKE_FAST if fast else K.SPIKE_SLOW, metric=ctx.metric, onset=int(st[s]),
                        peak=int(st[peak]), end=int(st[back]), baseline=base, peak_value=float(x[peak]),
                        magnitude=float(x[peak] - base), magnitude_sigma=float("nan"), recovery_steps=rec,
                        streams=ctx.streams, severity=Severity.WARNING if not fast or rel >= 0.5 else Severity.INFO,
                        evidence=evidence, details=details)
    left = len(x) - 1 - peak
    details["too_short_to_judge"] = "recovery"
    ends = ("it is the last point of the log" if not left else
            f"the log ends {left} point(s) ({int(st[-1] - st[peak])} steps) later, still at {x[-1]:.4g} "
            f"({x[-1] / base:.2f}x)")
    evidence = f"{what}; {ends}: {len(x)} points are too short to tell a slow recovery from none."
    return Incident(kind=K.SPIKE_NO_RECOVERY, metric=ctx.metric, onset=int(st[s]), peak=int(st[peak]), end=None,
                    baseline=base, peak_value=float(x[peak]), magnitude=float(x[peak] - base),
                    magnitude_sigma=float("nan"), streams=ctx.streams, severity=Severity.CRITICAL, evidence=evidence,
                    details=details)


def _climb(ctx: Context, m: int, p: int) -> Incident:
    x, st = ctx.ev.values, ctx.st
    rise = float(x[p] - x[m])
    # The turn: the foot of the final unbroken rise, when back at the low level (swings there are no climb).
    k = p
    while k > m and x[k - 1] < x[k]:
        k -= 1
    if x[k] <= x[m] + TURN_SHARE * rise:
        m, rise = k, float(x[p] - x[k])
    evidence = (f"The {ctx.metric} climbed from {x[m]:.4g} (step {int(st[m])}) to {x[p]:.4g} (step {int(st[p])}), "
                f"+{rise / abs(x[m]):.0%} over {p - m + 1} logged points, no single step carrying half the rise: "
                f"a climb, not a jump; the last point is {x[-1]:.4g}. Judged by the relative rule "
                f"({len(x)} points give no noise estimate).")
    return Incident(kind=K.DIVERGENCE, metric=ctx.metric, onset=int(st[m]), peak=int(st[p]), end=None,
                    baseline=float(x[m]), peak_value=float(x[p]), magnitude=rise, magnitude_sigma=float("nan"),
                    streams=ctx.streams, severity=Severity.CRITICAL, evidence=evidence,
                    details={"relative": rise / abs(x[m]), "rule": RELATIVE_RULE, "points": len(x)})


def _drop_split(x: np.ndarray, first: int, stop: int, side: int) -> tuple[int, int, int] | None:
    """``(k, before, after)``: the split ``first <= k < stop`` with the largest fall from the median
    of the ``before`` points up to it to the median of the ``after`` points from it (each side at most
    ``side`` points, at least :data:`DROP_SIDE_POINTS`), or None."""
    n, m = len(x), DROP_SIDE_POINTS
    best, out = -np.inf, None
    for k in range(max(first, m), min(stop, n - m + 1)):
        b, a = min(k, side), min(n - k, side)
        fall = float(np.median(x[k - b:k]) - np.median(x[k:k + a]))
        if fall > best:
            best, out = fall, (k, b, a)
    return out


def _short_drop(ctx: Context) -> Incident | None:
    """A sudden drop where the windowed drop test cannot judge (see the module docstring)."""
    x, st, d = ctx.ev.values, ctx.st, ctx.dcfg
    n, m, w = len(x), DROP_SIDE_POINTS, d.outlier.window
    from .loss_events import lr_peak  # (loss_events imports this module's neighbours; import late)

    peak = lr_peak(ctx)
    # The windowed test judges nothing on a log shorter than its spans, nor before a full window past
    # the LR warm-up (two windows without an LR series): :func:`.loss_events.drop_pass`.
    stop = n if n < drop_points_needed(d) else (peak + w if peak is not None else 2 * w)
    if n < 2 * m or stop <= m:
        return None
    side = max(m, (min(n, stop) - (peak or 0)) // DROP_SIDE_SHARE)  # a quarter of the stretch judged here
    # After a slow stretch of a whole side (a fall in the first points is the run's first descent) and
    # past the LR warm-up (a flat start then a steep fall is the warm-up).
    split = _drop_split(x, side + (peak or 0), stop, side)
    if split is None:
        return None
    k, nb, na = split
    region = x[:min(n, k + 2 * side)]
    before, after = x[k - nb:k], x[k:k + na]
    level, low = float(np.median(before)), float(np.median(after))
    fall = level - low
    noise = D2_TO_SIGMA * float(np.median(np.abs(np.diff(region, 2))))
    se = MEDIAN_SE * noise * np.sqrt(1 / nb + 1 / na)
    o = d.outlier
    if not (fall >= o.z_threshold * se and fall >= o.rel_threshold * abs(level) and abs(level) >= o.min_snr * noise):
        return None
    # Where the fall began: the split with the largest fall lies at its end (both medians clear of it),
    # so walk back over the points already a quarter of the way down.
    onset = k
    while onset > k - nb + 1 and x[onset - 1] <= level - FALL_START * fall:
        onset -= 1
    # Steep against the slope before it: the fall between the two medians is steep_ratio times what
    # the decline within the stretch before the fall (its first half against its second) makes over
    # the same distance. A power-law decline decelerates, so it never is.
    slow = x[max(0, onset - nb):onset]
    h = len(slow) // 2
    slope = max(float(np.median(slow[:h]) - np.median(slow[h:])), 0.0) / (len(slow) - h) if h else 0.0
    distance = (len(slow) + na) / 2 + (k - onset)
    if not fall > d.drop.steep_ratio * slope * distance + o.z_threshold * se / 2:
        return None
    # It stays: the last points of the stretch after it (the log's end on a short log) are still most of
    # the way down, and no resume explains a dip.
    if not float(np.median(region[-m:])) <= level - 0.5 * fall or ctx.boundary_near(k, m + na) is not None:
        return None
    if ctx.claims.covers(ctx.step(k - nb), ctx.step(k + na - 1)):
        return None  # the way back down from a spike or a shift
    bottom = k + int(np.argmax(x[k:k + na] <= low))
    evidence = (f"The {ctx.metric} fell from {level:.4g} (median of the {nb} points before step {int(st[onset])}) to "
                f"{low:.4g} (median of the {na} from it), {fall / abs(level):.0%} and {fall / se:.0f} standard errors, "
                f"{fall / max(slope * distance, 1e-12):.0f}x the decline the stretch before it would have made, and "
                f"stayed down. Judged by two medians: the windowed test needs {drop_points_needed(d)} points and a "
                f"full window past the LR warm-up ({n} points here).")
    return Incident(kind=K.SUDDEN_DROP, metric=ctx.metric, onset=int(st[onset]), peak=int(st[bottom]),
                    end=int(st[bottom]), baseline=level, peak_value=low, magnitude=-fall,
                    magnitude_sigma=-fall / noise if noise > 0 else float("-inf"),
                    recovery_steps=int(st[bottom] - st[onset]), streams=ctx.streams, severity=Severity.INFO,
                    evidence=evidence, details={"relative": -fall / abs(level), "rule": "short log, two medians",
                                                "points": n})


def short_pass(ctx: Context) -> None:
    """The relative rules over a log shorter than :data:`SHORT_LOG_POINTS` (see the module docstring)."""
    drop = _short_drop(ctx)
    if drop is not None:
        ctx.incidents.append(drop)
        ctx.claims.events.append((drop.onset, drop.end if drop.end is not None else drop.peak))  # a drop has an end
    n = len(ctx.ev.values)
    if not MIN_JUDGED_POINTS <= n < SHORT_LOG_POINTS:
        return
    stop = n
    while stop >= MIN_JUDGED_POINTS:
        # The largest rise first, then the stretch before its low point (a recovered spike, then a blow-up).
        found = _judge(ctx, stop)
        if found is None:
            return
        inc, stop = found[0], found[1] + 1
        # Where the detectors named the same stretch from their rough noise estimate, the relative rule
        # decides (the 13B excerpt: a divergence "without a spike" dated after the jump it denies).
        last = inc.end if inc.end is not None else int(ctx.st[-1])
        ctx.incidents[:] = [i for i in ctx.incidents if not (
            i.metric == ctx.metric and i.kind in REPLACED and i.onset <= last and inc.onset <= (i.end or i.peak))]
        ctx.incidents.append(inc)
        ctx.claims.events.append((inc.onset, last))


def _judge(ctx: Context, stop: int) -> tuple[Incident, int] | None:
    """The jump or climb to the highest point of ``x[:stop]`` and the index of its low, or None."""
    x = ctx.ev.values[:stop]
    o = ctx.cfg.detectors.outlier
    p = int(np.argmax(x))
    if p < 1:
        return None
    m = int(np.argmin(x[:p]))
    rise = float(x[p] - x[m])
    if not (x[m] != 0 and rise >= o.rel_threshold * o.warmup_rel_factor * abs(x[m])):
        return None
    d = np.diff(x[m:p + 1])
    s = m + 1 + int(np.argmax(d))
    if float(d.max()) >= JUMP_SHARE * rise:
        if s < MIN_JUDGED_POINTS - 1 and not sustained(x, s, x[m], rise):
            return None  # one point before the jump sets no level, unless the loss stays up after it
        if within_swing(ctx.ev.values, m, p):
            return None  # no more than the swings the log makes all along (a per-sample loss)
        return _spike(ctx, s, stop), m
    if p - m + 1 >= CLIMB_POINTS and x[-1] - x[m] >= STILL_HIGH * rise:
        return _climb(ctx, m, p), m
    return None
