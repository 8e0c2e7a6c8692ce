"""llm-foundry's ``KillLossSpike`` callback, as published (``log_only=True``: report, keep going).

Source read: mosaicml/llm-foundry ``llmfoundry/callbacks/kill_loss_spike_callback.py``. A window of
the last ``window_size`` losses (every loss appended, outliers included), ``window_size = max(100,
5% of the training batches)``; checks start once the window is full. A loss ``>= 2 x`` the window
mean is an outlier; the 5th consecutive outlier (``patience`` 4) reports a loss spike, and so does
every further outlier of the streak; a non-outlier resets the streak. Otherwise, after ``2 x
window_size`` batches, "high losses" are reported when at least half the window is above
``loss_cap = min(max(first window), 10)`` (the callback calls this a diverging or unstable run).
No NaN handling: a NaN enters the window and the mean is NaN until it leaves.

Event mapping: a reported loss spike is a loss-spike claim with its onset at the first outlier of
the streak (the callback logs "Potential loss spike detected. Iteration: 1" there); a run of
consecutive high-loss reports is one divergence claim at its first report.
"""
from __future__ import annotations

import numpy as np

from lossguard import metrics as M
from lossguard.classify.incident import IncidentKind as K
from lossguard.runlog import RunLog

from ._common import episodes, live, trailing_mean_std

NAME = "llm-foundry KillLossSpike (2x mean, 5 in a row)"
COVERS = frozenset({"spike", K.DIVERGENCE})


def reports(values: np.ndarray, *, total_points: int | None = None, multiplier: float = 2.0,
            patience: int = 4, window: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per point: (outlier, loss-spike report, high-loss report)."""
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    w = window or max(100, round(0.05 * (total_points or n)))
    mean, _, cnt = trailing_mean_std(x, w)
    with np.errstate(invalid="ignore"):
        outlier = (cnt >= w) & (x >= mean * multiplier)
    # streak length of consecutive outliers ending at each point
    idx = np.arange(n)
    last_clear = np.maximum.accumulate(np.where(~outlier, idx, -1))
    streak = np.where(outlier, idx - last_clear, 0)
    spike = streak > patience
    high = np.zeros(n, dtype=bool)
    if n > w:
        first = x[:w]
        cap = min(float(np.max(first)) if np.isfinite(first).all() else np.nan, 10.0)
        above = np.concatenate([[0], np.cumsum(np.where(np.isfinite(x), x > cap, False))])
        lo = np.maximum(idx - w, 0)
        count = above[idx] - above[lo]
        high = (idx >= 2 * w) & (cnt >= w) & (count >= w / 2) & ~spike
    return outlier, spike, high


def detect(log: RunLog) -> list[tuple[K, int]]:
    """Claims on one run."""
    steps, v = live(log, M.LOSS)
    if not len(v):
        return []
    outlier, spike, high = reports(v)
    out = []
    idx = np.arange(len(v))
    last_clear = np.maximum.accumulate(np.where(~outlier, idx, -1))
    for s in episodes(steps, spike):
        i = int(np.searchsorted(steps, s))
        out.append((K.SPIKE_FAST, int(steps[last_clear[i] + 1])))
    out += [(K.DIVERGENCE, s) for s in episodes(steps, high)]
    return out
