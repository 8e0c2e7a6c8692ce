"""A plain rolling z-score, the rule people write first.

Trailing window of the previous 100 logged points (the point itself excluded), mean and sample
std; ``z >= 4`` is an upward outlier, ``z <= -4`` a downward one. Applied to the loss (up: loss
spike, down: sudden drop) and to the grad norm (up: grad-norm spike). Non-finite points are dropped
before the statistics (the rule has no opinion on them). A run of consecutive flags is one event at
its first flag.
"""
from __future__ import annotations

import numpy as np

from lossguard import metrics as M
from lossguard.classify.incident import IncidentKind as K
from lossguard.runlog import RunLog

from ._common import episodes, live, trailing_mean_std

NAME = "rolling z-score (100, 4 sigma)"
COVERS = frozenset({"spike", K.SUDDEN_DROP, K.GRAD_NORM_SPIKE})


def zscores(values, *, window: int = 100) -> np.ndarray:
    """z of each point against the previous ``window`` points (NaN before the window is full)."""
    x = np.asarray(values, dtype=np.float64)
    mean, std, cnt = trailing_mean_std(x, window)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (x - mean) / std
    z[cnt < window] = np.nan
    return z


def detect(log: RunLog, *, threshold: float = 4.0) -> list[tuple[K, int]]:
    """Claims on one run."""
    out: list[tuple[K, int]] = []
    ls, lv = live(log, M.LOSS)
    f = np.isfinite(lv)
    z = zscores(lv[f])
    with np.errstate(invalid="ignore"):
        out += [(K.SPIKE_FAST, s) for s in episodes(ls[f], z >= threshold)]
        out += [(K.SUDDEN_DROP, s) for s in episodes(ls[f], z <= -threshold)]
        gs, gv = live(log, M.GRAD_NORM)
        g = np.isfinite(gv)
        out += [(K.GRAD_NORM_SPIKE, s) for s in episodes(gs[g], zscores(gv[g]) >= threshold)]
    return out
