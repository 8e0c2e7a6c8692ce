"""Stalled updates: stretches of a run in which no optimizer update was applied, though it kept logging.

A run whose every step is skipped looks alive: the log grows, the step counter advances. Three
traces of it, each a boolean mask over a series' points; a stall is a run of True at least
:data:`STALL_STEPS` steps (and 3 points) long:

- :func:`sentinel_mask`: a gradient norm below zero. A norm is never negative; DeepSpeed logs -1
  for an iteration whose update it skipped (bf16 / fp16 non-finite gradients), with no other trace;
- :func:`flat_mask`: a loss *exactly* equal to the one logged before it (not 0.0, which is the
  regime test's "exact zero"). A model that trains on new batches never repeats a float loss to the
  last bit; a repeated value is a logger repeating a stale number or a frozen run;
- the guard's own ``skip`` events on consecutive steps (:func:`consecutive_mask`).

One threshold for the analyser and the guard (``GuardConfig.max_withheld_streak``).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

STALL_STEPS = 100
"""Consecutive steps without an update after which a run is not training. Above the longest
legitimate streak of skipped steps: fp16 dynamic loss scaling halves its scale once per overflow
(Megatron: once per 2 with ``hysteresis=2``), so a start from 2**32 (Megatron's default initial
scale; DeepSpeed's is 2**16) to 1 skips at most 32 (64) steps; the guard's own policy escalates an
episode after 3 bad steps and halts once its rollback budget is spent."""


class StallCause(str, Enum):
    """How a stall showed in the log (the value is the identifier in JSON)."""

    SKIP_SENTINEL = "grad_norm_sentinel"
    """The grad norm was logged as a negative sentinel (DeepSpeed: -1 on a skipped step)."""
    FLAT_LOSS = "flat_loss"
    """The loss repeated the same float exactly."""
    GUARD_SKIPS = "guard_skips"
    """The guard's log has a ``skip`` event on every step."""


@dataclass(frozen=True)
class Stall:
    """One stretch without updates: points ``start..stop`` (inclusive indices) of a series."""

    cause: StallCause
    start: int
    stop: int

    @property
    def points(self) -> int:
        """Logged points in the stretch."""
        return self.stop - self.start + 1


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) indices of each run of True."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), (np.flatnonzero(edges == -1) - 1).tolist(), strict=True))


def sentinel_mask(grad_norm: np.ndarray) -> np.ndarray:
    """True where a grad norm is negative (a skipped step's sentinel)."""
    g = np.asarray(grad_norm, dtype=np.float64)
    return np.isfinite(g) & (g < 0)


FLAT_POINTS = 10
"""Logged points one exactly repeated loss must span to count as flat. A loss printed with a few
decimals repeats by chance on a plateau (a healthy OpenNMT-py log at 2 decimals, every 50 steps,
repeats 3-4 points in a row); 10 in a row of one value does not happen in a run that trains."""


COARSE_REPEATS = 0.05
"""A log whose other consecutive points repeat exactly more often than this prints its loss too
coarsely (1-2 decimals) for an exact repeat to mean anything: the flat rule does not judge it. A
log printed to 4+ significant digits repeats almost never while it trains."""


def flat_mask(loss: np.ndarray, *, min_points: int = FLAT_POINTS) -> np.ndarray:
    """True at every point of a stretch of at least ``min_points`` exactly equal, finite, non-zero
    losses. Each stretch is one value: two neighbouring pairs of different values never join."""
    v = np.asarray(loss, dtype=np.float64)
    out = np.zeros(len(v), dtype=bool)
    if len(v) < 2:
        return out
    eq = (v[1:] == v[:-1]) & np.isfinite(v[1:]) & (v[1:] != 0)  # point i+1 repeats point i
    long = [(a, b) for a, b in _runs(eq) if b - a + 2 >= min_points]  # eq[a..b]: points a..b+1 one value
    in_long = np.zeros(len(eq), dtype=bool)
    for a, b in long:
        in_long[a:b + 1] = True
    rest = eq[~in_long]
    if len(rest) and rest.mean() > COARSE_REPEATS:
        return out  # printed too coarsely to tell a stall from rounding (OpenNMT-py's 1-decimal loss)
    for a, b in long:
        out[a:b + 2] = True
    return out


def consecutive_mask(steps: np.ndarray) -> np.ndarray:
    """For sorted event steps: True at each step that has a neighbour one step away."""
    s = np.asarray(steps, dtype=np.int64)
    near = np.zeros(len(s), dtype=bool)
    if len(s) > 1:
        adj = np.diff(s) == 1
        near[1:] |= adj
        near[:-1] |= adj
    return near


def find_stalls(steps: np.ndarray, mask: np.ndarray, cause: StallCause, *,
                min_steps: int = STALL_STEPS) -> list[Stall]:
    """Runs of ``mask`` covering at least ``min_steps`` steps (last step - first step + 1) and 3 points."""
    st = np.asarray(steps, dtype=np.int64)
    return [Stall(cause, a, b) for a, b in _runs(np.asarray(mask, dtype=bool))
            if b - a + 1 >= 3 and int(st[b]) - int(st[a]) + 1 >= min_steps]
