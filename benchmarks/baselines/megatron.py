"""Megatron-LM's spiky-loss and NaN checks (``RerunStateMachine``), as published.

Source read: NVIDIA/Megatron-LM ``megatron/core/rerun_state_machine.py``,
``is_unexpectedly_large(result, threshold=10, context="loss", num_samples=100)``: the max of
``|loss|`` over the first 100 finite values is recorded; afterwards a loss ``>= 10 x`` that max is
"spiky". NaN and Inf are ignored by that check and caught by ``--check-for-nan-in-loss-and-grad``
(loss and grad norm).

Event mapping: a run of consecutive spiky points is one loss-spike claim at its first point; a run
of non-finite loss or grad-norm points is one non-finite claim.
"""
from __future__ import annotations

import numpy as np

from lossguard import metrics as M
from lossguard.classify.incident import IncidentKind as K
from lossguard.runlog import RunLog

from ._common import episodes, live

NAME = "Megatron spiky loss (10x max of first 100)"
COVERS = frozenset({"spike", K.NON_FINITE})


def flags(values, *, threshold: float = 10.0, num_samples: int = 100) -> np.ndarray:
    """True where Megatron would call the loss spiky."""
    x = np.abs(np.asarray(values, dtype=np.float64))
    fin = np.isfinite(x)
    order = np.flatnonzero(fin)
    out = np.zeros(len(x), dtype=bool)
    if len(order) <= num_samples:
        return out
    cap = float(x[order[:num_samples]].max())
    after = np.zeros(len(x), dtype=bool)
    after[order[num_samples:]] = True
    return after & (x >= threshold * cap)


def detect(log: RunLog) -> list[tuple[K, int]]:
    """Claims on one run."""
    steps, v = live(log, M.LOSS)
    out = [(K.SPIKE_FAST, s) for s in episodes(steps, flags(v))]
    gs, gv = live(log, M.GRAD_NORM)
    bad_steps = np.union1d(steps[~np.isfinite(v)], gs[~np.isfinite(gv)])
    all_steps = np.union1d(steps, gs)
    out += [(K.NON_FINITE, s) for s in episodes(all_steps, np.isin(all_steps, bad_steps))]
    return out
