"""fp16 loss-scale collapse: the dynamic loss scale falls to its floor under repeated overflows.

Dynamic loss scaling halves the scale on every overflowing step and skips that step; a healthy
fp16 run bounces between a few neighbouring powers of two (DeepSpeed-Chat's PPO log goes 65536 ->
8192 -> 16384 and is fine). A collapse is the scale falling to its floor (``<= floor``, 1 by
default, where the fp16 gradients underflow), or optionally by ``min_halvings`` powers of two below
the highest scale the run had reached. Skipped-iteration counts, where the log has them, are added to the
evidence by the classifier. The event lasts while the collapsed condition holds.

A collapse in progress is also caught before the floor (:func:`find_bursts`): the scale halving
``burst_halvings`` times within ``burst_points`` logged points without growing back in between is
an overflow on most steps, which healthy scaling never does past its first steps (it halves on one
overflow, then grows back over hundreds of steps). Megatron's opening calibration from 2**32 down
to its working scale halves on every step, so bursts that begin within ``calibration_steps`` of
step 0 do not count.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import raise_all


@dataclass(kw_only=True)
class LossScaleConfig:
    """Thresholds of the collapse test."""

    floor: float = 1.0
    """A scale at or below this has collapsed, whatever else the log says."""
    burst_halvings: int = 5
    """A burst: the scale halves this many times (2**5 = 32x down)..."""
    burst_points: int = 8
    """...within this many consecutive logged points, never growing in between."""
    calibration_steps: int = 100
    """Bursts beginning at or before this step are the opening calibration, not a collapse."""
    min_halvings: int | None = None
    """Optionally also: a scale this many halvings (2**n times) below the run's running maximum. Off by
    default, because runs start high on purpose (Megatron at 2**32) and fall to their working scale."""

    def __post_init__(self) -> None:
        problems = []
        if not self.floor > 0:
            problems.append(f"floor must be > 0, got {self.floor}")
        if self.burst_halvings < 1:
            problems.append(f"burst_halvings must be >= 1, got {self.burst_halvings}")
        if self.burst_points < 2:
            problems.append(f"burst_points must be >= 2, got {self.burst_points}")
        if self.min_halvings is not None and self.min_halvings < 1:
            problems.append(f"min_halvings must be >= 1, got {self.min_halvings}")
        raise_all(problems)


@dataclass
class Collapse:
    """A stretch of collapsed loss scale, in indices of the loss-scale series.

    Attributes:
        onset: index where the fall that led to the collapse began (last point at the running max + 1).
        trigger: first collapsed point.
        stop: last collapsed point.
        peak_scale: the running maximum before the fall.
        min_scale: lowest scale in the stretch.
        recovered: True when the scale rose out of the collapsed range before the log ended.
    """

    onset: int
    trigger: int
    stop: int
    peak_scale: float
    min_scale: float
    recovered: bool


def collapsed_mask(scale: np.ndarray, cfg: LossScaleConfig) -> tuple[np.ndarray, np.ndarray]:
    """Per point: collapsed or not, and the running maximum of the scale."""
    s = np.where(np.isfinite(scale), scale, np.nan)
    runmax = np.fmax.accumulate(np.where(np.isnan(s), -np.inf, s))
    with np.errstate(invalid="ignore"):
        mask = s <= cfg.floor
        if cfg.min_halvings is not None:
            mask |= s <= runmax / 2.0 ** cfg.min_halvings
    return mask & ~np.isnan(s), runmax


def is_static(scale: np.ndarray) -> bool:
    """True for a loss scale that never moves: bf16 runs print ``loss scale: 1.0`` on every line, and a
    static fp16 scale stays where it was set. Such a scale cannot collapse (it never fell), even when
    its value is the floor; a dynamic scale pasted from its floor on still shows its overflows
    (skipped iterations), which the caller checks."""
    s = np.asarray(scale, dtype=np.float64)
    s = s[np.isfinite(s)]
    return len(s) > 0 and bool(s.min() == s.max())


def find_collapses(scale: np.ndarray, cfg: LossScaleConfig | None = None) -> list[Collapse]:
    """Collapsed stretches of a loss-scale series (array operations plus one step per stretch)."""
    cfg = cfg or LossScaleConfig()
    scale = np.asarray(scale, dtype=np.float64)
    mask, runmax = collapsed_mask(scale, cfg)
    if not mask.any():
        return []
    edges = np.diff(np.concatenate([[0], mask.view(np.int8), [0]]))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    at_max = np.flatnonzero(scale >= runmax)
    out = []
    for a, b in zip(starts, stops, strict=True):
        before = at_max[at_max < a]
        onset = int(before[-1]) + 1 if len(before) else 0
        out.append(Collapse(onset, int(a), int(b), float(runmax[a]), float(np.nanmin(scale[a:b + 1])),
                            bool(b + 1 < len(scale))))
    return out


def find_bursts(steps: np.ndarray, scale: np.ndarray, cfg: LossScaleConfig | None = None) -> list[Collapse]:
    """Stretches where the scale halved ``burst_halvings`` times within ``burst_points`` points without
    growing in between (past the opening calibration), as :class:`Collapse` records."""
    cfg = cfg or LossScaleConfig()
    scale = np.asarray(scale, dtype=np.float64)
    ok = np.isfinite(scale) & (scale > 0)
    if ok.sum() < 2:
        return []
    idx = np.flatnonzero(ok)
    lg = np.log2(scale[idx])
    n = len(lg)
    # For every start i: the end z(i) of the non-increasing stretch from i, capped at burst_points
    # points, and how many halvings it holds (lg[i] - lg[z], the stretch being non-increasing).
    grows = np.flatnonzero(lg[1:] > lg[:-1])            # a growth right after point g
    nxt = np.searchsorted(grows, np.arange(n))           # first growth at or after i
    stretch_end = np.append(grows, n - 1)[nxt]
    z = np.minimum(stretch_end, np.arange(n) + cfg.burst_points - 1)
    fell = lg - lg[z]
    late = steps[idx] > cfg.calibration_steps
    hits = np.flatnonzero((fell >= cfg.burst_halvings - 1e-9) & late)
    out: list[Collapse] = []
    free_from = 0
    for i in hits:
        if i < free_from:
            continue
        trigger = i + int(np.argmax(lg[i] - lg[i:z[i] + 1] >= cfg.burst_halvings - 1e-9))
        stop = int(stretch_end[i])  # the collapse lasts while the scale keeps falling or stays down
        out.append(Collapse(int(idx[min(i + 1, n - 1)]), int(idx[trigger]), int(idx[stop]), float(scale[idx[i]]),
                            float(scale[idx[stop]]), bool(stop + 1 < n)))
        free_from = stop + 1
    return out
