"""Regime changes: the loss's noise jumps to a new, lasting level (often with its level moving too).

A healthy loss curve keeps its *relative* noise (sigma / level) roughly constant for thousands of
steps: the noise of a minibatch loss scales with the loss. When the data pipeline or the loss
changes underneath a run (a shard of a different distribution, a masking bug, a loss that lost a
term), the curve leaves its level and its noise changes at once: the Mixtral-8x7B run of issue 11
fell from ~3.0 to swing between 1.3 and 2.7, then sat at ~1.1 with a large variance. Each single
swing looks like a fast-recovering spike; the story is the change of regime.

The test, on finite points ``x`` with window ``W`` (the outlier window):

* noise is measured from **second** differences, ``1.4826 * median|x[t] - 2 x[t-1] + x[t-2]| /
  sqrt(6)``: a local linear trend (a falling loss, a spike's decay) does not inflate it, and a median
  ignores isolated outliers;
* at candidate boundaries every ``W / 4`` points (from two windows into the run, past the warm-up),
  the relative noise of the window before is compared with each of the next two windows; a regime
  change is where **both** exceed it ``noise_ratio`` times (it lasts), and the change point is
  refined to the split of ``|second difference|`` with the largest CUSUM statistic;
* the level change is reported alongside (median after vs before): upward, or suspiciously
  downward (a loss that is suddenly too good is a data or loss bug).

Whole-log only, like :mod:`.shift`: it needs two windows of the future.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import raise_all
from .robust import MAD_TO_SIGMA

D2_TO_SIGMA = MAD_TO_SIGMA / np.sqrt(6.0)
"""median |second difference| -> sigma (a second difference of white noise has sqrt(6) sigma)."""


@dataclass(kw_only=True)
class RegimeConfig:
    """Thresholds of the regime-change test."""

    noise_ratio: float = 3.0
    """The relative noise of each of the two windows after the change must be this many times the
    window's before. Smooth and noisy real runs alike keep it within 1.5x over a window (the noise
    scales with the loss); a regime change multiplies it."""
    start_windows: int = 2
    """No candidate before this many windows into the run (the first steps are the warm-up)."""

    def __post_init__(self) -> None:
        problems = []
        if not self.noise_ratio > 1:
            problems.append(f"noise_ratio must be > 1, got {self.noise_ratio}")
        if self.start_windows < 1:
            problems.append(f"start_windows must be >= 1, got {self.start_windows}")
        raise_all(problems)


@dataclass
class RegimeChange:
    """A lasting change of the noise level, in finite-point indices.

    Attributes:
        onset: the refined change point (first point of the new regime).
        end: first point back in the old regime (noise back below half the ratio), or None.
        level_before, level_after: medians of the window before and of the second window after.
        noise_before, noise_after: robust sigma (second differences) of those windows.
        ratio: relative-noise ratio, after over before (the smaller of the two windows after).
    """

    onset: int
    end: int | None
    level_before: float
    level_after: float
    noise_before: float
    noise_after: float
    ratio: float


def _window_rows(a: np.ndarray, starts: np.ndarray, w: int) -> np.ndarray:
    """Medians of ``a[s:s + w]`` for every start ``s`` (all windows inside ``a``)."""
    rows = np.lib.stride_tricks.sliding_window_view(a, w)[starts].copy()
    rows.partition(w // 2, axis=1)
    return rows[:, w // 2]


def _cusum_split(v: np.ndarray) -> int:
    """Index of the split of ``v`` with the largest |CUSUM| (the first index of the second part)."""
    n = len(v)
    if n < 3:
        return 0
    c = np.cumsum(v - v.mean())[:-1]
    return int(np.argmax(np.abs(c))) + 1


def find_regime_changes(x: np.ndarray, window: int, cfg: RegimeConfig | None = None) -> list[RegimeChange]:
    """Lasting jumps of the relative noise of finite values ``x`` (see the module docstring)."""
    cfg = cfg or RegimeConfig()
    x = np.asarray(x, dtype=np.float64)
    n, w = len(x), int(window)
    stride = max(1, w // 4)
    if n < (cfg.start_windows + 2) * w + 2:
        return []
    d2 = np.abs(x[2:] - 2 * x[1:-1] + x[:-2])           # d2[t - 2] belongs to point t
    bounds = np.arange(cfg.start_windows * w, n - 2 * w + 1, stride)
    if not len(bounds):
        return []
    # Windows of w points: before = [b - w, b), after1 = [b, b + w), after2 = [b + w, b + 2w); in d2
    # index space a window of points [s, s + w) holds d2[s - 2 : s + w - 2] (all inside the window's past).
    sig = lambda s: D2_TO_SIGMA * _window_rows(d2, s - 2, w)  # noqa: E731
    lev = lambda s: _window_rows(x, s, w)  # noqa: E731
    s0, s1, s2 = sig(bounds - w), sig(bounds), sig(bounds + w)
    l0, l1, l2 = lev(bounds - w), lev(bounds), lev(bounds + w)
    tiny = 1e-12
    r0 = s0 / np.maximum(np.abs(l0), tiny)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.minimum(s1 / np.maximum(np.abs(l1), tiny), s2 / np.maximum(np.abs(l2), tiny)) / r0
    hit = np.flatnonzero((r0 > 0) & (ratio >= cfg.noise_ratio))
    out: list[RegimeChange] = []
    free_from = 0
    for j in hit:
        b = int(bounds[j])
        if b < free_from:
            continue
        lo = b - w
        onset = lo + 2 + _cusum_split(d2[lo:b + w - 2])
        back = np.flatnonzero((bounds > b) & (s1 / np.maximum(np.abs(l1), tiny) < 0.5 * cfg.noise_ratio * r0[j]))
        end = int(bounds[back[0]]) if len(back) else None
        out.append(RegimeChange(onset, end, float(l0[j]), float(l2[j]), float(s0[j]), float(s2[j]), float(ratio[j])))
        if end is None:
            break
        free_from = end + w
    return out
