"""Sudden drops (grokking-like): a steep fall after a slow stretch that stays down.

Down-side outliers are everywhere in the first steps of a run, where the loss falls faster than a
trailing median can follow. A down-outlier only counts when it is steep *compared with the recent
trend*: its distance below the baseline must be ``steep_ratio`` times the baseline's own decline
over the previous ``window`` points (:func:`steep_gate_at`). Llama-2-7B's fall from 4 to 2.5 in ~60
steps after a slow stretch passes easily; warm-up, where the median lags the curve by about half
the decline of one window, never does. A gated down-episode becomes a drop when it has not come
back and was followed for ``persist_points`` points (:func:`is_drop`); one that comes back is a dip, which
:mod:`.resume` may still explain as repeated data.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..errors import raise_all
from .episode import Episode


@dataclass(kw_only=True)
class DropConfig:
    """Thresholds of the sudden-drop test."""

    steep_ratio: float = 3.0
    """Distance below the baseline must exceed this many times the baseline's decline over one window."""
    persist_points: int = 20
    """A down-episode not back in its band after this many points is a drop, not a dip."""

    def __post_init__(self) -> None:
        problems = []
        if not self.steep_ratio > 0:
            problems.append(f"steep_ratio must be > 0, got {self.steep_ratio}")
        if self.persist_points < 1:
            problems.append(f"persist_points must be >= 1, got {self.persist_points}")
        raise_all(problems)


def steep_gate_at(x: np.ndarray, base: np.ndarray, idx: np.ndarray, lag: int, cfg: DropConfig) -> np.ndarray:
    """For the points ``idx``: is the fall below the baseline steep compared with the decline of the
    baseline over the last ``lag`` points?"""
    ok = idx >= lag
    out = np.zeros(len(idx), dtype=bool)
    i = idx[ok]
    prev, b = base[i - lag], base[i]
    with np.errstate(invalid="ignore"):
        out[ok] = np.isfinite(prev) & np.isfinite(b) & (b - x[i] > cfg.steep_ratio * np.maximum(prev - b, 0.0))
    return out


class OnlineSteepGate:
    """The same gate, one point at a time (keeps the last ``lag`` baselines)."""

    def __init__(self, lag: int, cfg: DropConfig) -> None:
        self.cfg = cfg
        self._bases: deque = deque(maxlen=lag + 1)

    def update(self, value: float, base: float) -> bool:
        """Gate verdict for this point; then remember its baseline."""
        self._bases.append(base)
        if len(self._bases) < self._bases.maxlen:
            return False
        prev = self._bases[0]
        if not (math.isfinite(prev) and math.isfinite(base)):
            return False
        return bool(base - value > self.cfg.steep_ratio * max(prev - base, 0.0))


def is_drop(ep: Episode, cfg: DropConfig) -> bool:
    """A down-episode that never came back up and was followed for at least ``persist_points`` points."""
    return ep.end is None and ep.closed - ep.onset >= cfg.persist_points
