"""Sudden drops (grokking-like): a steep fall after a slow stretch that stays down.

Three tests, each scale-free, decide that a point belongs to a drop:

1. **Below the baseline, smoothed.** The median ``s`` of the last ``smooth_points`` values (odd, so
   both paths take the same middle element) sits below the trailing baseline by the outlier
   test's distance, with the noise term scaled to the standard error of that median
   (``1.2533 * sigma / sqrt(h)``): a drop is a new *level*, which a median of a few points shows long
   before single points pass a 7-sigma test in a noisy run (a 20% drop at 3.5% noise per step is
   only 6 sigma per point, but 17 standard errors of a 9-point median). Single deep points (a bad
   batch) never move a median of 9.
2. **Steep against the recent slope** (:func:`steep_gate_at`). Over the last ``span_points`` D the
   smoothed curve fell ``steep_ratio`` times more than the stretch of ``slow_spans`` q spans before
   it fell per span: ``s[i - D] - s[i] > steep_ratio * max(s[i - (q + 1) D] - s[i - D], 0) / q``.
   That fall must also exceed the noise of two medians by ``gate_z`` standard errors. The spans
   are short and
   local (the default is 128 optimizer steps, converted to points with the log interval), so a
   plateau shorter than the outlier window (a short run logged every 10 steps) still counts as the
   slow stretch. A power-law decline decelerates, so its recent fall is never several times the one
   before; Llama-2-7B's fall from 4 to 2.5 in ~60 steps after a slow stretch passes easily. (The LR
   warm-up, flat then falling, is the one smooth curve that accelerates; the classifier excludes
   it.)
3. **It stays** (:func:`is_drop`): the down-episode has not come back and was followed for
   ``persist_points`` points. One that comes back is a dip, which :mod:`.resume` may explain as
   repeated data.

:func:`smoothed_down` and :func:`steep_gate_at` are the vectorised tests (evaluated only where a
cheap necessary condition holds, so a million points cost a few milliseconds);
:class:`OnlineDropGate` is their online twin, and tests prove both give the same episodes.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..errors import raise_all
from .episode import Excursion
from .outlier import OutlierConfig, thresholds

MEDIAN_SE = 1.2533  # sqrt(pi / 2): standard error of a median of Gaussian samples, per sigma / sqrt(n)


@dataclass(kw_only=True)
class DropConfig:
    """Thresholds of the sudden-drop test (counts are in logged points)."""

    smooth_points: int = 9
    """Odd number of latest points whose median is compared with the baseline."""
    span_points: int = 128
    """Points over which the recent fall is compared with the fall just before it (the analyser sets
    it from ``AnalyzeConfig.drop_span_steps`` and the log interval)."""
    slow_spans: int = 3
    """The slow stretch before the fall is measured over this many spans (a longer stretch gives a
    rate that the noise of two short medians cannot make look flat)."""
    steep_ratio: float = 3.0
    """The fall over the last span must exceed this many times the decline the slow stretch before it
    would have made over one span."""
    gate_z: float = 3.0
    """...plus this many standard errors of the difference of two smoothed values: with hundreds of
    candidate points in a fast early decline, the noise of two medians must not pass for a steep fall."""
    persist_points: int = 20
    """A down-episode not back in its band after this many points is a drop, not a dip."""

    def __post_init__(self) -> None:
        problems = []
        if self.smooth_points < 1 or self.smooth_points % 2 == 0:
            problems.append(f"smooth_points must be odd and >= 1, got {self.smooth_points}")
        if self.span_points < 1:
            problems.append(f"span_points must be >= 1, got {self.span_points}")
        if self.slow_spans < 1:
            problems.append(f"slow_spans must be >= 1, got {self.slow_spans}")
        if not self.gate_z >= 0:
            problems.append(f"gate_z must be >= 0, got {self.gate_z}")
        if not self.steep_ratio > 0:
            problems.append(f"steep_ratio must be > 0, got {self.steep_ratio}")
        if self.persist_points < 1:
            problems.append(f"persist_points must be >= 1, got {self.persist_points}")
        raise_all(problems)


def drop_threshold(ocfg: OutlierConfig, cfg: DropConfig, base, noise, warm):
    """Distance below the baseline the smoothed value must reach: the outlier test's, with its noise
    term shrunk to the standard error of a median of ``smooth_points`` values."""
    thr = thresholds(ocfg, base, noise * (MEDIAN_SE / math.sqrt(cfg.smooth_points)), warm)
    # Abstain where the point test abstains (a level within its per-point noise of zero has no scale).
    return np.where(np.abs(base) >= ocfg.min_snr * noise, thr, np.inf)


def _medians_at(x: np.ndarray, idx: np.ndarray, h: int) -> np.ndarray:
    """median(x[i - h + 1 : i + 1]) for every i in ``idx`` (all >= h - 1), odd ``h``."""
    rows = np.lib.stride_tricks.sliding_window_view(x, h)[idx - (h - 1)].copy()
    rows.partition(h // 2, axis=1)
    return rows[:, h // 2]


def smoothed_down(x: np.ndarray, base: np.ndarray, noise: np.ndarray, warm: np.ndarray,
                  ocfg: OutlierConfig, cfg: DropConfig) -> tuple[np.ndarray, np.ndarray]:
    """Indices where the median of the last ``smooth_points`` values is a down-outlier, and those medians.

    ``base``/``noise`` are the trailing statistics of each point (NaN = no verdict); ``warm`` is True
    while the outlier window is still filling.
    """
    h = cfg.smooth_points
    m = len(x)
    if m < h:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    # Necessary: the smallest of the last h values is below the baseline by at least the relative
    # part of the threshold (the full threshold is never smaller). Shifted minima, not a strided
    # reduction: a few milliseconds per million points.
    lo = x[:m - h + 1].copy()                  # lo[j] = min(x[j : j + h])
    for j in range(1, h):
        np.minimum(lo, x[j:m - h + 1 + j], out=lo)
    b = base[h - 1:]
    with np.errstate(invalid="ignore"):
        cand = np.flatnonzero(b - lo >= ocfg.rel_threshold * np.abs(b)) + (h - 1)
    if len(cand):
        bc, nc = base[cand], noise[cand]
        thr = drop_threshold(ocfg, cfg, bc, nc, warm[cand])
        cand = cand[bc - lo[cand - (h - 1)] >= thr]
    if not len(cand):
        return cand, np.zeros(0)
    s = _medians_at(x, cand, h)
    keep = base[cand] - s >= drop_threshold(ocfg, cfg, base[cand], noise[cand], warm[cand])
    return cand[keep], s[keep]


def _gate_margin(cfg: DropConfig, noise):
    """gate_z standard errors of the difference of two independent medians of ``smooth_points``."""
    return cfg.gate_z * math.sqrt(2.0) * MEDIAN_SE / math.sqrt(cfg.smooth_points) * noise


def steep_gate_at(x: np.ndarray, noise: np.ndarray, idx: np.ndarray, cfg: DropConfig) -> np.ndarray:
    """For the points ``idx``: did the smoothed curve fall ``steep_ratio`` times more over the last
    ``span_points`` than over the span before?"""
    h, d, q = cfg.smooth_points, cfg.span_points, cfg.slow_spans
    ok = idx >= (q + 1) * d + h - 1
    out = np.zeros(len(idx), dtype=bool)
    i = idx[ok]
    if len(i):
        s0, s1, s2 = _medians_at(x, i - (q + 1) * d, h), _medians_at(x, i - d, h), _medians_at(x, i, h)
        out[ok] = s1 - s2 > cfg.steep_ratio * np.maximum(s0 - s1, 0.0) / q + _gate_margin(cfg, noise[i])
    return out


class OnlineDropGate:
    """Tests 1 and 2, one point at a time (keeps the last ``(slow_spans + 1) * span + 1`` smoothed values)."""

    def __init__(self, ocfg: OutlierConfig, cfg: DropConfig) -> None:
        self.ocfg, self.cfg = ocfg, cfg
        self._last: deque = deque(maxlen=cfg.smooth_points)
        self._window = (cfg.slow_spans + 1) * cfg.span_points + 1
        self._smooth: deque[float] = deque(maxlen=self._window)

    def update(self, value: float, base: float, noise: float, warm: bool) -> bool:
        """Take a finite value with its trailing baseline/noise; True when it belongs to a steep drop."""
        h = self.cfg.smooth_points
        self._last.append(value)
        if len(self._last) < h:
            return False
        s = sorted(self._last)[h // 2]
        self._smooth.append(s)
        if not (math.isfinite(base) and math.isfinite(noise)):
            return False
        o = self.ocfg
        if not base - s >= o.rel_threshold * abs(base):   # necessary (cheap): the relative part alone
            return False
        # drop_threshold() for one point, in plain floats (the same IEEE operations, the same number).
        scale = abs(base)
        if not scale >= o.min_snr * noise:
            return False
        se = noise * (MEDIAN_SE / math.sqrt(self.cfg.smooth_points))
        if not scale >= o.min_snr * se:
            return False
        rel = o.rel_threshold * o.warmup_rel_factor if warm else o.rel_threshold
        if not base - s >= max(o.z_threshold * se, rel * max(scale, 1e-12)):
            return False
        if len(self._smooth) < self._window:
            return False
        s0, s1 = self._smooth[0], self._smooth[-1 - self.cfg.span_points]
        return bool(s1 - s > self.cfg.steep_ratio * max(s0 - s1, 0.0) / self.cfg.slow_spans
                    + float(_gate_margin(self.cfg, noise)))


def is_drop(ep: Excursion, cfg: DropConfig) -> bool:
    """A down-episode that never came back up and was followed for at least ``persist_points`` points."""
    return ep.end is None and ep.closed - ep.onset >= cfg.persist_points


WIDE_BLOCKS = 4
"""A wide drop's scale ``S`` is cut into this many blocks; levels are medians of block medians."""


@dataclass
class WideDrop:
    """A fall wider than the windowed test sees, in finite-point indices.

    Attributes:
        at: first point of the block after which the level is lower (the fall is within a scale of it).
        scale: points over which each level is measured.
        level_before, level_after: the two levels (medians of block medians).
    """

    at: int
    scale: int
    level_before: float
    level_after: float


def find_wide_drops(x: np.ndarray, noise: float, ocfg: OutlierConfig, cfg: DropConfig, *, first: int,
                    scales: tuple[int, ...]) -> list[WideDrop]:
    """Falls that take longer than the trailing window to happen (whole-log only, no online twin).

    The windowed test compares a median of a few points with the trailing median of a window: when
    the fall itself lasts longer than half a window, that median follows it down and the gap never
    reaches the threshold. At each scale ``S`` of ``scales`` (points), levels are medians of
    :data:`WIDE_BLOCKS` block medians (blocks of ``S / WIDE_BLOCKS`` points) and the same three tests
    apply at that scale: the level after is below the level before by ``rel_threshold`` and
    ``z_threshold`` standard errors of two such levels; the fall is ``steep_ratio`` times the decline
    per scale of the ``slow_spans`` scales before it (plus ``gate_z`` standard errors); and one scale
    later the level is still at least half the fall down. Candidates start at index ``first``.
    """
    out: list[WideDrop] = []
    x = np.asarray(x, dtype=np.float64)
    q, z = cfg.slow_spans, WIDE_BLOCKS
    for s in scales:
        b = max(1, s // z)
        nb = len(x) // b
        if nb < (q + 3) * z or not noise > 0:
            continue
        m = np.median(x[:nb * b].reshape(nb, b), axis=1)
        lev = np.lib.stride_tricks.sliding_window_view(m, z)
        lev = np.median(lev, axis=1)                      # lev[j] = level of blocks j..j+z-1
        j = np.arange((q + 1) * z, nb - 2 * z + 1)        # the later level starts at block j
        before, after, later = lev[j - z], lev[j], lev[j + z]
        slow = lev[j - (q + 1) * z]
        se = MEDIAN_SE * noise * math.sqrt(2.0 / (z * b))
        fall = before - after
        ok = ((fall >= ocfg.z_threshold * se) & (fall >= ocfg.rel_threshold * np.abs(before))
              & (np.abs(before) >= ocfg.min_snr * noise)
              & (fall > cfg.steep_ratio * np.maximum(slow - before, 0.0) / q + cfg.gate_z * se)
              & (later <= before - 0.5 * fall) & (j * b >= first))
        hits = np.flatnonzero(ok)
        for g in np.split(hits, np.flatnonzero(np.diff(hits) > z) + 1) if len(hits) else []:
            k = int(g[np.argmax(fall[g])])
            at = int(j[k]) * b
            if any(abs(at - w.at) <= max(s, w.scale) for w in out):
                continue  # the same fall seen at a smaller scale
            out.append(WideDrop(at, s, float(before[k]), float(after[k])))
    return out
