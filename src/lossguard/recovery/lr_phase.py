"""Is the LR ramping up? The evidence the policy needs to tell the LR schedule from bad data.

A grad-norm blow-up while the LR is still climbing (warm-up, or right after an upward LR change) is
the schedule's doing: the weights meet a larger step size than they have seen. Skipping the data
does not help -- the next batches meet the same LR -- and a rollback replays the same ramp.
:meth:`lossguard.recovery.RecoveryPolicy.observe` uses this flag to hold a rollback back in that case
(suspect :attr:`Suspect.LR_SCHEDULE`).

Rule: a step is *in the ramp* when the LR rose, from one step to the next, at most ``window`` steps
before it (the LR the step used, after any LR cut of the ledger). Two twins with the same answer:
:class:`LrRamp` (the live guard: one float per step) and :func:`lr_ramp_series` (``simulate``: the
logged LR, vectorised). A log without an LR is never in the ramp.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

RISE = 1e-9
"""Relative increase that counts as the LR rising (a float tolerance: a constant LR never rises)."""

JUMP = 3.0
"""A rise by at least this factor from one step to the next is a jump, not a ramp: a linear warm-up
rises by at most 2x per step (its first step), an LR fault by 10-30x (the zoo's LR-jump scenario).
The judge waives clipped grad-norm evidence in a ramp, not after a jump (:func:`lr_jump_series`,
:meth:`LrRamp.jumped`): withholding protects against a step size the run has never had."""


class LrRamp:
    """Host twin: feed every step's LR, get whether the step is in the ramp.

    Args:
        window: steps after the LR last rose that still count as the ramp.
    """

    def __init__(self, window: int) -> None:
        self.window = int(window)
        self.last = math.nan
        self.rose_at: int | None = None
        self.jumped_at: int | None = None

    def update(self, step: int, lr: float) -> bool:
        """Record the LR of ``step`` (in step order); True when the step is in the ramp."""
        if lr == lr and self.last == self.last and lr > self.last * (1.0 + RISE):
            self.rose_at = int(step)
            if lr >= self.last * JUMP:
                self.jumped_at = int(step)
        if lr == lr:
            self.last = float(lr)
        return self.rose_at is not None and int(step) - self.rose_at <= self.window

    def jumped(self, step: int) -> bool:
        """The LR jumped (by :data:`JUMP` or more in one step) at most ``window`` steps before ``step``."""
        return self.jumped_at is not None and int(step) - self.jumped_at <= self.window

    def state_dict(self) -> dict[str, Any]:
        """Timeline state (rolled back with a checkpoint)."""
        return {"last": None if self.last != self.last else self.last, "rose_at": self.rose_at,
                "jumped_at": self.jumped_at}

    def load_state_dict(self, sd: dict[str, Any] | None) -> None:
        """Restore :meth:`state_dict` output (None: a checkpoint from before the ramp was tracked)."""
        sd = sd or {}
        self.last = math.nan if sd.get("last") is None else float(sd["last"])
        self.rose_at = None if sd.get("rose_at") is None else int(sd["rose_at"])
        self.jumped_at = None if sd.get("jumped_at") is None else int(sd["jumped_at"])


def lr_ramp_series(steps: np.ndarray, lr: np.ndarray, window: int, factor: float = 1.0 + RISE) -> np.ndarray:
    """Vectorised twin of :class:`LrRamp` over logged points (``lr`` NaN where not logged); with
    ``factor`` = :data:`JUMP`, the twin of :meth:`LrRamp.jumped`."""
    lr = np.asarray(lr, dtype=np.float64)
    n = len(lr)
    if n == 0:
        return np.zeros(0, dtype=bool)
    ok = ~np.isnan(lr)
    # The previous *logged* LR at each point (NaN before the first one).
    idx = np.where(ok, np.arange(n), -1)
    prev_idx = np.concatenate([[-1], np.maximum.accumulate(idx)[:-1]])
    prev = np.where(prev_idx >= 0, lr[np.maximum(prev_idx, 0)], np.nan)
    with np.errstate(invalid="ignore"):
        rose = ok & ~np.isnan(prev) & (lr >= prev * factor if factor > 1.0 + RISE else lr > prev * factor)
    last_rise = np.maximum.accumulate(np.where(rose, np.arange(n), -1))
    rose_step = np.where(last_rise >= 0, np.asarray(steps)[np.maximum(last_rise, 0)], 0)
    return (last_rise >= 0) & (np.asarray(steps) - rose_step <= window)


def lr_jumps(steps: np.ndarray, lr_log: tuple[np.ndarray, np.ndarray] | None, window: int) -> np.ndarray:
    """:meth:`LrRamp.jumped` at every point from ``(values, logged mask)`` of a log's LR (None: never)."""
    if lr_log is None:
        return np.zeros(len(steps), dtype=bool)
    return lr_ramp_series(steps, np.where(lr_log[1], lr_log[0], np.nan), window, JUMP)
