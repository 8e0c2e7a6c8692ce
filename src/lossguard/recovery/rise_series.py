"""The vectorised twin of the policy's loss-rise rule, for ``lossguard simulate``.

:meth:`RecoveryPolicy.loss_rising` sees every good step of a live run; ``simulate`` must not loop
over a million steps in Python, so it finds the steps where the rule fires from the loss baseline's
running minimum here, sets the policy's level from :meth:`LossRiseSeries.level_before` and lets the
policy decide there (it stays the one definition of the decision).
"""
from __future__ import annotations

from typing import Any

import numpy as np


class LossRiseSeries:
    """The vectorised twin of :meth:`RecoveryPolicy.loss_rising`'s level from ``start`` on (a fresh level).

    The policy counts the good verdicts with a finite loss baseline (``eligible``), tracks the lowest
    baseline from the ``loss_rise_after``-th of them on (its step: the first to reach it), and fires
    where a baseline is more than ``loss_rise`` above the lowest one before it. Here that is a
    running minimum over the eligible points: O(n) numpy, no Python loop per step.

    Args:
        baseline: the loss baseline per point (``score(loss).baseline``).
        eligible: the points the rule sees (good verdicts with a finite baseline).
        config: the policy configuration (``loss_rise``, ``loss_rise_after``).
        start: the first point (the level is fresh there: run start, or after a loss-rise rollback).
    """

    def __init__(self, baseline: np.ndarray, eligible: np.ndarray, config: Any, *, start: int) -> None:
        idx = start + np.flatnonzero(eligible[start:]) if config.loss_rise is not None else np.zeros(0, np.int64)
        b = np.asarray(baseline, dtype=np.float64)[idx]
        k = np.arange(len(idx))
        tracked = k + 1 >= config.loss_rise_after           # the policy's "seen" after counting the point
        run_min = np.minimum.accumulate(np.where(tracked, b, np.inf))
        prev = np.concatenate([[np.inf], run_min[:-1]])      # the lowest value before the point
        lowest_at = np.maximum.accumulate(np.where(tracked & (b < prev), k, -1))
        self.prev_at = np.concatenate([[-1], lowest_at[:-1]])
        with np.errstate(invalid="ignore", over="ignore"):
            fire = tracked & np.isfinite(prev) & (prev > 0) & (b > prev * (1.0 + (config.loss_rise or 0.0)))
        self.idx, self.prev, self.fires, self.pos = idx, prev, np.flatnonzero(fire), 0

    def next_fire(self) -> int:
        """The point where the rule fires next (consumed by :meth:`level_before`); 2**62 if never."""
        return int(self.idx[self.fires[self.pos]]) if self.pos < len(self.fires) else 2 ** 62

    def level_before(self, i: int, steps: np.ndarray) -> dict[str, Any]:
        """The policy's level (``RecoveryPolicy.level``) just before point ``i``, the next fire."""
        k = int(self.fires[self.pos])
        self.pos += 1
        return {"seen": k, "best": float(self.prev[k]), "best_step": int(steps[self.idx[self.prev_at[k]]])}
