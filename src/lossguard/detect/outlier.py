"""Robust outlier statistic shared by the analyser and the guard: median / MAD of a trailing window.

The baseline of a point is the median of the last ``window`` finite values before it, and its noise
is ``1.4826 * median(|x[t] - x[t-1]|) / sqrt(2)`` over the same window: the MAD estimator of sigma
applied to first differences, which a trend does not inflate (the MAD of the values themselves
mistakes the fast early decline of a loss curve for noise and hides every spike in it). It is
floored at ``rel_noise_floor * |median|`` so a perfectly flat curve does not make every wiggle
infinite. A median has a 50% breakdown point, so a spike shorter than half the window cannot drag
the baseline up with it; episodes longer than that are handled by :mod:`.episode`, which freezes the
pre-event baseline at onset.

Refresh schedule (identical in both paths, counted in finite points ``c`` seen so far): while the
window fills (``min_points <= c < window``) the statistics are refreshed at every point, so short
logs and the first steps of a run get a verdict; afterwards every ``stride`` points, which keeps the
whole-log path at ~0.15 s per million points. A point is an outlier when it is non-finite, or when it
is ``z_threshold`` noise units *and* ``rel_threshold`` (relative to the baseline; doubled while the
window is still filling) away from the baseline on the watched side.

Near-zero baselines: a relative threshold is meaningless for a quantity that sits at zero (an RL
policy loss is noise around 0). When ``|median| < min_snr * noise`` the level cannot be told from
the noise, so the test abstains instead of calling every heavy-tailed sample a spike.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..errors import raise_all
from .robust import DIFF_TO_SIGMA, window_stats



@dataclass(kw_only=True)
class OutlierConfig:
    """Settings of the robust outlier test (the defaults are scale-free: they work on any loss level)."""

    window: int = 128
    """Trailing finite points the baseline is computed from."""
    stride: int = 32
    """Once the window is full, refresh the baseline every this many finite points (1 = every point)."""
    min_points: int = 5
    """No verdict before this many finite points."""
    z_threshold: float = 7.0
    """Distance from the baseline, in noise units, that makes a point an outlier."""
    rel_threshold: float = 0.12
    """...and the relative distance (|x - median| / |median|) it must also exceed. Smooth real runs
    reach 1.10x their rolling median (modded-nanogpt AdamW 124M); the smallest real spike in the
    Mixtral CI run is 1.15x its trailing median."""
    warmup_rel_factor: float = 2.0
    """``rel_threshold`` is multiplied by this while the window is still filling (few points, rough noise)."""
    rel_noise_floor: float = 1e-3
    """Noise is at least this fraction of |median|."""
    min_snr: float = 1.0
    """Abstain when ``|median| < min_snr * noise``: a level indistinguishable from zero has no scale."""
    side: str = "up"
    """Which excursions count: ``"up"`` (loss, grad norm spikes), ``"down"`` or ``"both"``."""

    def __post_init__(self) -> None:
        problems = []
        if self.window < 4:
            problems.append(f"window must be >= 4, got {self.window}")
        if not 1 <= self.stride <= max(self.window, 1):
            problems.append(f"stride must be in [1, window={self.window}], got {self.stride}")
        if not 2 <= self.min_points <= self.window:
            problems.append(f"min_points must be in [2, window={self.window}], got {self.min_points}")
        if not self.z_threshold > 0:
            problems.append(f"z_threshold must be > 0, got {self.z_threshold}")
        if not self.rel_threshold >= 0:
            problems.append(f"rel_threshold must be >= 0, got {self.rel_threshold}")
        if not self.warmup_rel_factor >= 1:
            problems.append(f"warmup_rel_factor must be >= 1, got {self.warmup_rel_factor}")
        if not self.rel_noise_floor >= 0:
            problems.append(f"rel_noise_floor must be >= 0, got {self.rel_noise_floor}")
        if not self.min_snr >= 0:
            problems.append(f"min_snr must be >= 0, got {self.min_snr}")
        if self.side not in ("up", "down", "both"):
            problems.append(f"side must be 'up', 'down' or 'both', got {self.side!r}")
        raise_all(problems)


@dataclass
class OutlierScores:
    """Per-point result of the vectorised test; arrays align with the input.

    Attributes:
        baseline: median of the trailing window (NaN before ``min_points`` and for non-finite points).
        noise: robust sigma of the trailing window, from its first differences (NaN likewise).
        z: signed distance from the baseline in noise units (NaN likewise).
        outlier: True where the point is an outlier (always True for non-finite values).
    """

    baseline: np.ndarray
    noise: np.ndarray
    z: np.ndarray
    outlier: np.ndarray


def thresholds(cfg: OutlierConfig, median, noise, warm):
    """Distance from the baseline a point must reach to be an outlier (inf where the test abstains).

    ``max(z_threshold * noise, rel * |median|)`` with ``rel`` doubled while the window fills; both
    paths compare against this same number, so they agree bit for bit.
    """
    scale = np.abs(median)
    rel = np.where(warm, cfg.rel_threshold * cfg.warmup_rel_factor, cfg.rel_threshold)
    thr = np.maximum(cfg.z_threshold * noise, rel * np.maximum(scale, 1e-12))
    return np.where(scale >= cfg.min_snr * noise, thr, np.inf)


def _verdict(side: str, dev, thr):
    """Outlier test on ``dev = x - median`` against ``thr``; scalars and arrays alike."""
    if side == "up":
        return (dev > 0) & (dev >= thr)
    if side == "down":
        return (dev < 0) & (-dev >= thr)
    return (dev != 0) & (np.abs(dev) >= thr)


def refresh_counts(m: int, cfg: OutlierConfig) -> np.ndarray:
    """Finite-point counts at which the statistics are refreshed, for a series of ``m`` finite points."""
    warm = np.arange(cfg.min_points, min(cfg.window, m))
    full = np.arange(cfg.window, m, cfg.stride)
    return np.concatenate([warm, full]).astype(np.int64)


@dataclass
class FiniteScores:
    """Per finite point: baseline, noise, and the up / down verdicts (what the detectors consume)."""

    baseline: np.ndarray
    noise: np.ndarray
    up: np.ndarray
    down: np.ndarray | None


def score_finite(x: np.ndarray, cfg: OutlierConfig, *, down: bool = False) -> FiniteScores:
    """The test over finite values ``x``: statistics per refresh block, expanded with ``np.repeat``."""
    m = len(x)
    base = np.full(m, np.nan)
    noise = np.full(m, np.nan)
    up = np.zeros(m, dtype=bool)
    dn = np.zeros(m, dtype=bool) if down else None
    if m > cfg.min_points:
        refresh = refresh_counts(m, cfg)
        med, sig = window_stats(x, refresh, window=cfg.window, rel_noise_floor=cfg.rel_noise_floor)
        thr = thresholds(cfg, med, sig, refresh < cfg.window)
        counts = np.diff(np.append(refresh, m))
        f = int(refresh[0])
        base[f:] = np.repeat(med, counts)
        noise[f:] = np.repeat(sig, counts)
        t = np.repeat(thr, counts)
        dev = x[f:] - base[f:]
        up[f:] = (dev > 0) & (dev >= t)
        if dn is not None:  # (asked for with ``down``)
            dn[f:] = (dev < 0) & (-dev >= t)
    return FiniteScores(base, noise, up, dn)


def score(values: np.ndarray, cfg: OutlierConfig | None = None) -> OutlierScores:
    """Vectorised outlier test over a whole series (points in step order).

    Identical, point for point, to feeding the values one at a time to :class:`OnlineOutlier`.
    """
    cfg = cfg or OutlierConfig()
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    allf = bool(finite.all())
    x = values if allf else values[finite]
    fs = score_finite(x, cfg, down=cfg.side != "up")
    if cfg.side == "up" or fs.down is None:  # (down is computed whenever the side is not "up")
        flags = fs.up
    else:
        flags = fs.down if cfg.side == "down" else fs.up | fs.down
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (x - fs.baseline) / fs.noise
    if allf:
        return OutlierScores(fs.baseline, fs.noise, z, flags)
    n = len(values)
    baseline, noise, zz = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    outlier = ~finite
    baseline[finite], noise[finite], zz[finite] = fs.baseline, fs.noise, z
    outlier[finite] = flags
    return OutlierScores(baseline, noise, zz, outlier)


@dataclass
class PointVerdict:
    """Online result for one point (the scalar twin of one row of :class:`OutlierScores`)."""

    outlier: bool
    baseline: float
    noise: float
    z: float
    threshold: float = float("nan")
    """Distance from the baseline that made (or would make) the point an outlier, either side."""


_NAN = float("nan")


@dataclass
class OnlineOutlier:
    """The same test, one point at a time, with checkpointable state.

    ``update(value)`` returns the verdict for that value, then takes it into the window if finite.
    """

    config: OutlierConfig = field(default_factory=OutlierConfig)
    _window: deque = field(init=False, repr=False)
    _count: int = field(init=False, default=0)
    _median: float = field(init=False, default=_NAN)
    _noise: float = field(init=False, default=_NAN)
    _refreshed: int = field(init=False, default=0)
    _thr_count: int = field(init=False, default=-1)
    _thr: float = field(init=False, default=_NAN)

    def __post_init__(self) -> None:
        self._window = deque(maxlen=self.config.window)

    @property
    def count(self) -> int:
        """Finite points seen so far."""
        return self._count

    def update(self, value: float) -> PointVerdict:
        """Judge ``value`` against the current baseline, then add it to the window."""
        cfg = self.config
        value = float(value)
        if not math.isfinite(value):
            return PointVerdict(True, _NAN, _NAN, _NAN)
        c = self._count
        if cfg.min_points <= c < cfg.window or (c >= cfg.window and (c - cfg.window) % cfg.stride == 0):
            w = np.fromiter(self._window, dtype=np.float64, count=len(self._window))
            self._median = float(np.median(w))
            mad = float(np.median(np.abs(np.diff(w))))
            self._noise = max(DIFF_TO_SIGMA * mad, cfg.rel_noise_floor * abs(self._median))
            self._refreshed += 1
        if c < cfg.min_points:
            verdict = PointVerdict(False, _NAN, _NAN, _NAN)
        else:
            if self._thr_count != self._refreshed:
                self._thr = float(thresholds(cfg, self._median, self._noise, c < cfg.window))
                self._thr_count = self._refreshed
            out = bool(_verdict(cfg.side, value - self._median, self._thr))
            z = (value - self._median) / self._noise if self._noise > 0 else (
                _NAN if value == self._median else np.copysign(np.inf, value - self._median))
            verdict = PointVerdict(out, self._median, self._noise, float(z), self._thr)
        self._window.append(value)
        self._count += 1
        return verdict

    def state_dict(self) -> dict:
        """Everything needed to continue exactly where this left off."""
        return {"window": list(self._window), "count": self._count, "median": self._median, "noise": self._noise}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""
        self._window = deque(state["window"], maxlen=self.config.window)
        self._count = int(state["count"])
        self._median = float(state["median"])
        self._noise = float(state["noise"])
        self._thr_count = -1
