"""Non-finite values: runs of NaN / Inf in the loss or the gradient norm.

A NaN is never noise: one is enough. Consecutive non-finite points form one event, so a run that
went NaN at step 1200 and stayed NaN is one incident, not ten thousand.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class NonFiniteRun:
    """Consecutive non-finite points, in indices of the series (all points, not only finite ones).

    Attributes:
        start: index of the first non-finite point.
        stop: index of the last one.
        nan: how many were NaN (the rest were +-Inf).
        recovered: True when a finite value followed.
    """

    start: int
    stop: int
    nan: int
    recovered: bool


def find_nonfinite(values: np.ndarray) -> list[NonFiniteRun]:
    """Runs of non-finite values, found with array operations only."""
    bad = ~np.isfinite(np.asarray(values, dtype=np.float64))
    if not bad.any():
        return []
    edges = np.diff(np.concatenate([[0], bad.view(np.int8), [0]]))
    starts = np.flatnonzero(edges == 1)
    stops = np.flatnonzero(edges == -1) - 1
    nan_cum = np.concatenate([[0], np.cumsum(np.isnan(values))])
    return [NonFiniteRun(int(a), int(b), int(nan_cum[b + 1] - nan_cum[a]), bool(b + 1 < len(values)))
            for a, b in zip(starts, stops, strict=True)]


class OnlineNonFinite:
    """The same, one value at a time: ``update`` returns the run that just ended, if any."""

    def __init__(self) -> None:
        self._i = -1
        self._run: NonFiniteRun | None = None

    @property
    def active(self) -> NonFiniteRun | None:
        """The run in progress, or None."""
        return self._run

    def update(self, value: float) -> NonFiniteRun | None:
        """Advance by one value (finite or not)."""
        self._i += 1
        value = float(value)
        if not math.isfinite(value):
            if self._run is None:
                self._run = NonFiniteRun(self._i, self._i, 0, False)
            self._run.stop = self._i
            self._run.nan += value != value
            return None
        if self._run is not None:
            run, self._run = self._run, None
            run.recovered = True
            return run
        return None

    def finish(self) -> NonFiniteRun | None:
        """The run still open at the end of the log, if any."""
        run, self._run = self._run, None
        return run
