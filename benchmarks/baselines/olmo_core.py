"""OLMo-core's skip-step rule (``SkipStepOptimizer.get_step_factor``), as published.

Source read: allenai/OLMo-core ``src/olmo_core/optim/skip_step_optimizer.py``. The optimizer keeps
the last ``rolling_interval_length + 1`` (=129) losses and grad norms, *every* one appended whether
the step was skipped or not. Once it holds at least ``max(20, rolling_interval_length // 2)`` (=64)
values, a step is skipped when ``|x - mean| / std > sigma_factor`` (=6) for the loss or for the grad
norm, mean and std (unbiased) taken over the previous 128 values. Note the ``abs``: a sudden *drop*
is skipped too.

Event mapping: a run of consecutive skipped points is one event at its first skip; loss-flagged runs
are loss-spike claims (the rule does not tell fast from slow), runs flagged by the grad norm alone are
grad-norm-spike claims. A non-finite loss is a non-finite claim (OLMo-core's trainer stops on a NaN
loss); non-finite points are kept out of the window so the rest of the run can still be scored.
"""
from __future__ import annotations

import numpy as np

from lossguard import metrics as M
from lossguard.classify.incident import IncidentKind as K
from lossguard.runlog import RunLog

from ._common import episodes, live, trailing_mean_std

NAME = "OLMo-core skip-step (128, 6 sigma)"
COVERS = frozenset({"spike", K.GRAD_NORM_SPIKE, K.NON_FINITE})


def flags(values: np.ndarray, *, window: int = 128, sigma: float = 6.0) -> np.ndarray:
    """True where OLMo-core would skip the step, for one series (finite values only)."""
    x = np.asarray(values, dtype=np.float64)
    mean, std, cnt = trailing_mean_std(x, window)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.abs(x - mean) / std
    warm = cnt + 1 >= max(20, window // 2)       # history incl. the current value
    return warm & (z > sigma)


def detect(log: RunLog) -> list[tuple[K, int]]:
    """Claims on one run."""
    out: list[tuple[K, int]] = []
    ls, lv = live(log, M.LOSS)
    gs, gv = live(log, M.GRAD_NORM)
    out += [(K.NON_FINITE, s) for s in episodes(ls, ~np.isfinite(lv))]
    lf = np.isfinite(lv)
    out += [(K.SPIKE_FAST, s) for s in episodes(ls[lf], flags(lv[lf]))]
    if len(gv):
        gf = np.isfinite(gv)
        out += [(K.GRAD_NORM_SPIKE, s) for s in episodes(gs[gf], flags(gv[gf]))]
    return out
