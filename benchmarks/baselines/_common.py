"""Shared plumbing of the baseline rules: the live series, rolling statistics, flags -> events.

Every baseline is fed what its framework would have seen: the live (stitched) timeline of logged
points, one value per logged step. Windows are counted in logged points (a framework that checks
every optimizer step sees ``log_every`` times more points; the synthetic runs log every 1, 5 or 10
steps, so for a third of them the two are the same).

Most of these rules flag points, not episodes. Turning flags into events the way a user reading the
framework's log would: a run of consecutive flagged points is ONE event, placed at its first flag.
"""
from __future__ import annotations

import numpy as np

from lossguard.runlog import RunLog
from lossguard.stitch import stitch


def live(log: RunLog, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Live steps and values of ``metric`` after stitching; empty arrays when it is absent."""
    log = stitch(log)
    if metric not in log.series:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    return log.live(metric)


def episodes(steps: np.ndarray, flags: np.ndarray) -> list[int]:
    """First step of each run of consecutive flagged points."""
    flags = np.asarray(flags, dtype=bool)
    if not flags.any():
        return []
    starts = flags & ~np.concatenate([[False], flags[:-1]])
    return [int(s) for s in steps[starts]]


def trailing_mean_std(x: np.ndarray, window: int, *, ddof: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, std and count of the ``window`` values *before* each point (the point itself excluded).

    Non-finite values inside a window make that window's mean and std NaN (as ``np.mean`` would).
    """
    n = len(x)
    bad = ~np.isfinite(x)
    xc = np.where(bad, 0.0, x)
    ref = float(np.median(xc[~bad])) if (~bad).any() else 0.0
    xc = np.where(bad, 0.0, xc - ref)   # centre first: keeps the cumulative sums well conditioned
    c1 = np.concatenate([[0.0], np.cumsum(xc)])
    c2 = np.concatenate([[0.0], np.cumsum(xc * xc)])
    cb = np.concatenate([[0], np.cumsum(bad)])
    hi = np.arange(n)
    lo = np.maximum(hi - window, 0)
    cnt = (hi - lo).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        s1, s2 = c1[hi] - c1[lo], c2[hi] - c2[lo]
        mean = s1 / cnt
        var = (s2 - cnt * mean * mean) / (cnt - ddof)
        std = np.sqrt(np.maximum(var, 0.0))
        mean = mean + ref
    poisoned = (cb[hi] - cb[lo]) > 0
    mean[poisoned | (cnt == 0)] = np.nan
    std[poisoned | (cnt <= ddof)] = np.nan
    return mean, std, cnt.astype(np.int64)
