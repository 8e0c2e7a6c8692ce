"""Change points with ``ruptures`` (binary segmentation, least-squares cost), as its users run it.

The loss (finite live points) is averaged into at most 300 blocks (ruptures' l2 cost is quadratic
in memory and time otherwise), then ``rpt.Binseg(model="l2", min_size=5).fit(x).predict(pen=pen)``
with the usual BIC-style penalty ``pen = 2 log(n) sigma^2``, sigma estimated robustly from the
first differences (``1.4826 MAD / sqrt(2)``).

Each break is classified by the means of the segments on either side: a rise is a level shift, or a
divergence when it opens the last segment and the loss is still rising there (second half of the
segment above its first half); a fall of more than 10% after the first 20% of the run is a sudden
drop (the ordinary decay of a loss curve also produces falling breaks; those are not claims).
"""
from __future__ import annotations

import numpy as np

from lossguard import metrics as M
from lossguard.classify.incident import IncidentKind as K
from lossguard.errors import require
from lossguard.runlog import RunLog

from ._common import live

NAME = "ruptures Binseg (l2, BIC penalty)"
COVERS = frozenset({K.LEVEL_SHIFT, K.DIVERGENCE, K.SUDDEN_DROP})


def breaks(x: np.ndarray, *, max_points: int = 300) -> tuple[np.ndarray, list[int], np.ndarray]:
    """Block means, the break indices (into the blocks, last = len) and each block's first index."""
    rpt = require("ruptures", "bench", "The ruptures baseline")
    n = len(x)
    b = max(1, int(np.ceil(n / max_points)))
    m = n // b
    blocks = x[: m * b].reshape(m, b).mean(axis=1)
    first = np.arange(m) * b
    d = np.diff(blocks)
    sigma = 1.4826 * np.median(np.abs(d - np.median(d))) / np.sqrt(2) if len(d) else 0.0
    pen = 2 * np.log(max(m, 2)) * max(sigma, 1e-12) ** 2
    bkps = rpt.Binseg(model="l2", min_size=5, jump=1).fit(blocks).predict(pen=pen)
    return blocks, bkps, first


def detect(log: RunLog) -> list[tuple[K, int]]:
    """Claims on one run."""
    steps, v = live(log, M.LOSS)
    f = np.isfinite(v)
    steps, v = steps[f], v[f]
    if len(v) < 50:
        return []
    blocks, bkps, first = breaks(v)
    out = []
    edges = [0] + list(bkps)
    for j in range(1, len(edges) - 1):
        a, b, c = edges[j - 1], edges[j], edges[j + 1]
        left, right = blocks[a:b].mean(), blocks[b:c].mean()
        step = int(steps[first[b]])
        if right > left:
            seg = blocks[b:c]
            rising = c == len(blocks) and len(seg) >= 4 and seg[len(seg) // 2:].mean() > seg[: len(seg) // 2].mean()
            out.append((K.DIVERGENCE if rising else K.LEVEL_SHIFT, step))
        elif right < 0.9 * left and b >= 0.2 * len(blocks):
            out.append((K.SUDDEN_DROP, step))
    return out
