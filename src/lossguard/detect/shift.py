"""Level shifts too small for the point-outlier test: a step in the curve of window medians.

The point test needs a 12% jump (smooth real runs reach 1.10x their rolling median point by
point); a shift of 5-10% that *stays* is still plain to see in medians of whole windows, whose
standard error is ~0.11 sigma for 128 points. At refresh block ``i`` (window medians ``m``, one per
``stride`` points, ``q = window / stride`` blocks per window) the jump against the trend is the
second difference of non-overlapping window medians::

    J_i = (m[i+q] - m[i]) - (m[i] - m[i-q])

(the change from the previous window to the next, minus the change the trend already made). A shift
is declared where ``J`` exceeds ``z`` standard errors and ``rel`` of the level, the level one window
further on is still as high against the extrapolated trend (it *stays*), and the curve is not still
climbing (that would be a divergence), and somewhere near it the median of 16 points rose by at least
half the jump over the 16 before (a step, not a decline that stopped). Whole-log only: it needs a window of the
future, and the guard does not act on a level shift before it has persisted anyway.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import raise_all


@dataclass(kw_only=True)
class ShiftConfig:
    """Thresholds of the window-median step test."""

    z: float = 8.0
    """Jump in standard errors of the second difference of window medians..."""
    rel: float = 0.04
    """...and as a fraction of the level."""

    def __post_init__(self) -> None:
        raise_all([f"{n} must be > 0, got {getattr(self, n)}" for n in ("z", "rel") if not getattr(self, n) > 0])


@dataclass
class Shift:
    """A step up that stayed, in finite-point indices.

    Attributes:
        block: index of the window whose end the step follows (in the refresh grid).
        at: finite index where the step is steepest.
        jump: size of the step against the trend (loss units).
        level_before: window median before the step.
        noise: per-point robust sigma there.
    """

    block: int
    at: int
    jump: float
    level_before: float
    noise: float


def find_shifts(x: np.ndarray, base: np.ndarray, noise: np.ndarray, refresh: np.ndarray, window: int,
                cfg: ShiftConfig | None = None) -> list[Shift]:
    """Steps up in the window medians ``base[refresh]`` (full windows only) that stay."""
    cfg = cfg or ShiftConfig()
    r = refresh[refresh >= window]
    if len(r) < 4:
        return []
    q = max(1, window // int(r[1] - r[0])) if len(r) > 1 else 1
    med, sig = base[r], noise[r]
    n = len(med)
    if n < 4 * q + 1:
        return []
    i = np.arange(q, n - 2 * q)
    trend = med[i] - med[i - q]
    jump = med[i + q] - med[i] - trend
    later = med[i + 2 * q] - med[i] - 2 * trend       # one window further, against the same trend
    climb = (med[i + 2 * q] - med[i + q]) - trend      # still rising after the step?
    se = 1.2533 * sig[i] / np.sqrt(window) * np.sqrt(6.0)
    thr = np.maximum(cfg.z * se, cfg.rel * np.abs(med[i]))
    ok = (jump >= thr) & (later >= 0.5 * jump) & (climb < 0.5 * jump)
    hits = np.flatnonzero(ok)
    out: list[Shift] = []
    h = 16
    for g in np.split(hits, np.flatnonzero(np.diff(hits) > q) + 1) if len(hits) else []:
        k = int(g[np.argmax(jump[g])])
        b = int(i[k])
        lo, hi = max(0, int(r[b]) - window // 2), min(len(x), int(r[b]) + window + window // 2)
        seg = x[lo:hi]
        at = int(r[b])
        if len(seg) > 2 * h:
            mm = np.median(np.lib.stride_tricks.sliding_window_view(seg, h), axis=1)
            d = mm[h:] - mm[:-h]
            at = lo + int(np.argmax(d)) + h
            # A step is a local jump up: somewhere the median of h points rose by most of the jump
            # over the h before it. A decline that merely stops (a kink into a plateau) has the same
            # second difference of window medians but no such jump: it never rose.
            if float(d.max()) < 0.5 * float(jump[k]):
                continue
        out.append(Shift(b, at, float(jump[k]), float(med[b]), float(sig[b])))
    return out
