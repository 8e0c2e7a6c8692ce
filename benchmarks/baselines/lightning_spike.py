"""Lightning's ``SpikeDetection`` callback with its defaults, as published.

Source read: ``lightning/fabric/utilities/spike.py`` (installed). Defaults: ``mode="min"``,
``window=10`` (running mean of the last 10 *accepted* values), ``warmup=1``, ``atol=None``,
``rtol=2.0``, ``finite_only=True``. From batch ``warmup`` on, a batch is a spike when its loss is
not finite, or when it is worse than the last accepted loss and ``|loss - mean| >= 2 x mean``, i.e.
``loss >= 3 x`` the running mean. A spike is not added to the running statistics.

The callback raises ``TrainingSpikeException`` at the first spike; to score a whole log we report
and go on (as a user who resumes with the batch skipped would). Event mapping: a run of consecutive
spikes is one event at its first spike; non-finite -> non-finite claim, else loss-spike claim.
"""
from __future__ import annotations

import math
from collections import deque

import numpy as np

from lossguard import metrics as M
from lossguard.classify.incident import IncidentKind as K
from lossguard.runlog import RunLog

from ._common import episodes, live

NAME = "Lightning SpikeDetection (window 10, 3x mean)"
COVERS = frozenset({"spike", K.NON_FINITE})


def flags(values, *, window: int = 10, warmup: int = 1, rtol: float = 2.0) -> np.ndarray:
    """True where the callback would detect a spike."""
    out = np.zeros(len(values), dtype=bool)
    recent: deque[float] = deque(maxlen=window)
    total = 0.0
    last = 0.0
    for i, x in enumerate(map(float, values)):
        spike = False
        if i >= warmup:
            if not math.isfinite(x):
                spike = True
            elif x - last > 0 and recent:
                mean = total / len(recent)
                spike = abs(x - mean) >= abs(rtol * mean)
        out[i] = spike
        if not spike and math.isfinite(x):
            if len(recent) == window:
                total -= recent[0]
            recent.append(x)
            total += x
            last = x
    return out


def detect(log: RunLog) -> list[tuple[K, int]]:
    """Claims on one run."""
    steps, v = live(log, M.LOSS)
    f = flags(v)
    bad = ~np.isfinite(v)
    return [(K.NON_FINITE, s) for s in episodes(steps, f & bad)] + \
           [(K.SPIKE_FAST, s) for s in episodes(steps, f & ~bad)]
