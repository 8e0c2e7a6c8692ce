"""One outlier pass per series per analysis: the trailing-window statistics, computed once and shared.

``analyze`` runs the analyser's detectors and then replays the guard's policy over the same log
(``simulate``, so the plans are the policy's decisions). Both score the loss (and the grad norm)
with the same trailing window, and the window medians are most of the cost of either. Inside
:func:`shared_window_stats` the first pass over a series keeps its statistics and any later pass
over the *same values* with the same window settings reuses them -- exact sharing, not an
approximation: the statistics are a function of the values and those settings only, and a hit
needs the values equal element for element. The thresholds (z, relative, SNR), which differ
between the analyser's grad-norm test and the guard's, are applied afterwards by each pass.

Outside the context (the guard, ``simulate`` on its own) nothing is kept. The memo lives in a
:class:`contextvars.ContextVar`, so threads and nested analyses do not see each other's series.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Hashable, Iterator

import numpy as np

__all__ = ["shared_window_stats", "window_stats_once"]

Stats = tuple[np.ndarray, np.ndarray]
_MEMO: ContextVar[list[tuple[np.ndarray, Hashable, Stats]] | None] = ContextVar("lossguard_window_stats", default=None)


@contextmanager
def shared_window_stats() -> Iterator[None]:
    """While inside, equal series scored with equal window settings compute their statistics once."""
    token = _MEMO.set([])
    try:
        yield
    finally:
        _MEMO.reset(token)


def window_stats_once(x: np.ndarray, key: Hashable, compute: Callable[[], Stats]) -> Stats:
    """``compute()`` -- the window statistics of the finite values ``x`` under settings ``key`` --
    or the result a previous call in this :func:`shared_window_stats` context got for equal values."""
    memo = _MEMO.get()
    if memo is None:
        return compute()
    for seen, k, stats in memo:
        if k == key and seen.shape == x.shape and np.array_equal(seen, x):
            return stats
    stats = compute()
    memo.append((x.copy(), key, stats))  # a copy: the caller may reuse its buffer
    return stats
