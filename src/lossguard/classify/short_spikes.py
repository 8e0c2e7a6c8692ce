"""Spikes on logs shorter than the outlier window, judged against the whole log's noise.

The point test compares each point with the median and noise of the points *before* it. On a log
shorter than its window (128 points) every point is judged while the window fills: the noise comes
from a handful of differences, so the relative threshold is doubled (24%), and the trailing median
still holds the steep first steps of the run, far above where the loss is now. A 19% one-point jump
44 points into a 107-point log passes neither. Offline, the whole log is there: its noise is the
robust sigma of *all* its first differences (a median ignores the few that a spike makes), and the
level a point jumps from is the median of the few points just before it. :func:`short_spike_pass`
reports the upward jumps of at least ``z_threshold`` of that noise and ``rel_threshold`` (not
doubled) of that level that no other pass explains, and says how they ended:

* back within ``POINT_BAND_Z`` noise units (or ``end_rel``) of the level before: a fast spike when
  that took at most ``fast_steps`` or one logged point (a sparse log cannot resolve less), else slow;
  a resume spike when it began right after a resume;
* never back: a level shift when the last points keep ``shift_ratio`` of the jump, else a spike
  without recovery.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..detect.outlier import DIFF_TO_SIGMA
from ..recovery.severity import Severity
from .classifier import POINT_BAND_Z
from .context import Context, overlap
from .incident import Incident, IncidentKind as K
from .short import SHORT_LOG_POINTS

LEVEL_POINTS = 5
"""The level a point jumps from is the median of this many points before it (local: the trailing
median of a whole window would still hold the run's first, much higher, steps)."""
TREND_POINTS = 16
"""The trend a spike must come back to is the decline of up to this many points before it (Theil-Sen
slope against log(step), the gentler of its two halves, never a rise, as
:func:`.classifier.expected_level` extrapolates), from the level: a loss that kept falling before the
spike should keep falling after it, and a spike back at the old level is still above that trend."""
EARLY_POINTS = 3
"""The peak is the largest of this many points from the jump."""
LOSS_KINDS = frozenset({K.SPIKE_FAST, K.SPIKE_SLOW, K.SPIKE_NO_RECOVERY, K.DIVERGENCE, K.LEVEL_SHIFT,
                        K.REGIME_CHANGE, K.SUDDEN_DROP, K.RESUME_SPIKE, K.REPEATED_DATA})
"""Loss incidents found by the other passes; a jump inside one of them is already explained."""


def _decline(y: np.ndarray, t: np.ndarray) -> float:
    """Theil-Sen slope of ``y`` against ``t`` (median of the pairwise slopes), or 0 when it rises."""
    if len(y) < 3:
        return 0.0
    a, b = np.triu_indices(len(y), 1)
    ok = t[b] > t[a]
    if not ok.any():
        return 0.0
    return min(0.0, float(np.median((y[b] - y[a])[ok] / (t[b] - t[a])[ok])))


def _incident(ctx: Context, i: int, level: float, noise: float) -> tuple[Incident, int]:
    """Classify the jump at finite index ``i`` from ``level``; return it and its last index."""
    x, st, cfg = ctx.ev.values, ctx.st, ctx.cfg
    n = len(x)
    peak = i + int(np.argmax(x[i:i + EARLY_POINTS]))
    height = float(x[peak] - level)
    band = max(POINT_BAND_Z * noise, cfg.detectors.spike.end_rel * abs(level))
    after = np.arange(peak + 1, n)
    lt = np.log(np.maximum(st.astype(np.float64), 1.0))
    pre = slice(max(0, i - TREND_POINTS), i)
    centre = float(np.median(lt[i - LEVEL_POINTS:i]))
    # The gentler of the declines of the two halves of the stretch before (as expected_level does):
    # a power law flattens, and one noisy half must not be extrapolated.
    h = (pre.stop - pre.start) // 2
    ya, ta = x[pre], lt[pre]
    slope = max(_decline(ya[:h], ta[:h]), _decline(ya[h:], ta[h:]))
    expected = level + slope * (lt[after] - centre)
    back = np.flatnonzero(x[after] - expected <= band)
    what = (f"The {ctx.metric} jumped from {level:.4g} (median of the {LEVEL_POINTS} points before) to {x[peak]:.4g} "
            f"at step {int(st[peak])} (+{height / abs(level):.0%}, "
            f"{height / noise:.0f} sigma of the whole log's noise)")
    common: dict[str, Any] = dict(metric=ctx.metric, onset=int(st[i]), peak=int(st[peak]), baseline=level,
                                  peak_value=float(x[peak]), magnitude=height, magnitude_sigma=height / noise,
                                  streams=ctx.streams)
    details = {"relative": height / abs(level), "rule": "short log, whole-log noise", "points": n}
    if len(back):
        j = peak + 1 + int(back[0])
        rec, pts = int(st[j] - st[peak]), j - peak
        details["points_to_recover"] = pts
        fast = rec <= cfg.fast_steps or pts <= 1
        resumed = ctx.boundary_near(i, cfg.resume.spike_points) is not None
        kind = K.RESUME_SPIKE if resumed else K.SPIKE_FAST if fast else K.SPIKE_SLOW
        big = not fast or height >= 0.5 * abs(level)
        sev = Severity.INFO if resumed else Severity.WARNING if big else Severity.INFO
        evidence = (f"{what}; it was back within {band:.3g} of that level's trend at step {int(st[j])}, {rec} steps "
                    f"({pts} logged point(s)) after its peak" + (", right after a resume." if resumed else "."))
        return Incident(kind=kind, end=int(st[j]), recovery_steps=rec, severity=sev, evidence=evidence,
                        details=details, **common), j
    # How much of the jump the last points keep, against the trend (a declining loss keeps declining).
    last = max(peak + 1, n - LEVEL_POINTS)
    tail = float(np.median(x[last:])) if last < n else float(x[peak])
    excess = float(np.median(x[last:] - expected[last - peak - 1:])) if last < n else height
    kept = excess / height if height > 0 else 0.0
    details["kept_fraction"] = kept
    shift = kept >= cfg.shift_ratio and peak + LEVEL_POINTS < n
    evidence = (f"{what}; it never came back: the last points sit at {tail:.4g}, keeping {kept:.0%} of the jump "
                "above the trend before it"
                + (" (a new level)." if shift else "."))
    return Incident(kind=K.LEVEL_SHIFT if shift else K.SPIKE_NO_RECOVERY, end=None,
                    severity=Severity.WARNING if shift else Severity.CRITICAL, evidence=evidence, details=details,
                    **common), n - 1


def short_spike_pass(ctx: Context) -> None:
    """Upward jumps on a log of ``SHORT_LOG_POINTS`` to ``window`` points that no pass explained."""
    x, st, o = ctx.ev.values, ctx.st, ctx.dcfg.outlier
    n = len(x)
    if not SHORT_LOG_POINTS <= n < o.window:
        return
    noise = DIFF_TO_SIGMA * float(np.median(np.abs(np.diff(x))))
    if not noise > 0:
        return
    taken = [(i.onset, i.end if i.end is not None else int(st[-1])) for i in ctx.incidents
             if i.metric == ctx.metric and i.kind in LOSS_KINDS] + ctx.claims.events
    i = LEVEL_POINTS
    while i < n:
        level = float(np.median(x[i - LEVEL_POINTS:i]))
        jump = x[i] - level
        if not (jump >= o.z_threshold * noise and jump >= o.rel_threshold * abs(level)
                and abs(level) >= o.min_snr * noise):
            i += 1
            continue
        if any(overlap(int(st[i - 1]), int(st[i]), a, z) for a, z in taken):
            i += 1
            continue
        inc, last = _incident(ctx, i, level, noise)
        ctx.incidents.append(inc)
        ctx.claims.events.append((inc.onset, int(st[last])))
        taken.append((inc.onset, int(st[last])))
        i = last + 1
