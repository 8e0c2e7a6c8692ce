"""Robust outlier statistic shared by the analyser and the guard: median / MAD of a trailing window.

The baseline of a point is the median of the last ``window`` finite values before it, and its noise
is ``1.4826 * MAD`` of the same window (the consistent estimator of sigma for Gaussian noise),
floored at ``rel_noise_floor * |median|`` so a perfectly flat curve does not make every wiggle
infinite. A median has a 50% breakdown point, so a spike shorter than half the window cannot drag
the baseline up with it; that is what keeps a spike out of its own baseline without the sequential
"exclude what was flagged" loop that would make the whole-log path slow.

To make the online and vectorised paths agree exactly and keep the per-step cost flat, the baseline
is refreshed every ``stride`` finite points, from the window that ends at the refresh point. A point
is an outlier when it is non-finite, or when it is ``z_threshold`` noise units *and*
``rel_threshold`` (relative to the baseline) away from the baseline on the watched side.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..errors import raise_all

MAD_TO_SIGMA = 1.4826  # 1 / Phi^-1(3/4): MAD -> standard deviation for Gaussian noise


@dataclass(kw_only=True)
class OutlierConfig:
    """Settings of the robust outlier test (the defaults are scale-free: they work on any loss level)."""

    window: int = 128
    """Trailing finite points the baseline is computed from."""
    stride: int = 8
    """Refresh the baseline every this many finite points (1 = every point)."""
    min_points: int = 16
    """No verdict before this many finite points (warm-up)."""
    z_threshold: float = 6.0
    """Distance from the baseline, in noise units, that makes a point an outlier."""
    rel_threshold: float = 0.08
    """...and the relative distance (|x - median| / |median|) it must also exceed."""
    rel_noise_floor: float = 1e-3
    """Noise is at least this fraction of |median|."""
    side: str = "up"
    """Which excursions count: ``"up"`` (loss, grad norm spikes), ``"down"`` or ``"both"``."""

    def __post_init__(self) -> None:
        problems = []
        if self.window < 4:
            problems.append(f"window must be >= 4, got {self.window}")
        if not 1 <= self.stride <= max(self.window, 1):
            problems.append(f"stride must be in [1, window={self.window}], got {self.stride}")
        if not 2 <= self.min_points:
            problems.append(f"min_points must be >= 2, got {self.min_points}")
        if not self.z_threshold > 0:
            problems.append(f"z_threshold must be > 0, got {self.z_threshold}")
        if not self.rel_threshold >= 0:
            problems.append(f"rel_threshold must be >= 0, got {self.rel_threshold}")
        if not self.rel_noise_floor >= 0:
            problems.append(f"rel_noise_floor must be >= 0, got {self.rel_noise_floor}")
        if self.side not in ("up", "down", "both"):
            problems.append(f"side must be 'up', 'down' or 'both', got {self.side!r}")
        raise_all(problems)


@dataclass
class OutlierScores:
    """Per-point result of the vectorised test; arrays align with the input.

    Attributes:
        baseline: median of the trailing window (NaN during warm-up and for non-finite points).
        noise: robust sigma of the trailing window (NaN likewise).
        z: signed distance from the baseline in noise units (NaN likewise).
        outlier: True where the point is an outlier (always True for non-finite values).
    """

    baseline: np.ndarray
    noise: np.ndarray
    z: np.ndarray
    outlier: np.ndarray


def _verdict(cfg: OutlierConfig, x, median, noise):
    """Outlier test given baseline statistics; works on numpy scalars and arrays alike."""
    dev = x - median
    rel = np.abs(dev) / np.maximum(np.abs(median), 1e-12)
    if cfg.side == "up":
        far = dev > 0
    elif cfg.side == "down":
        far = dev < 0
    else:
        far = dev != 0
    return far & (np.abs(dev) >= cfg.z_threshold * noise) & (rel >= cfg.rel_threshold)


def score(values: np.ndarray, cfg: OutlierConfig | None = None) -> OutlierScores:
    """Vectorised outlier test over a whole series (points in step order).

    Identical, point for point, to feeding the values one at a time to :class:`OnlineOutlier`.
    """
    cfg = cfg or OutlierConfig()
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    finite = np.isfinite(values)
    x = values[finite]
    m = len(x)
    baseline = np.full(n, np.nan)
    noise = np.full(n, np.nan)
    z = np.full(n, np.nan)
    outlier = ~finite
    if m > cfg.min_points:
        # Refresh points r (counted in finite points): multiples of stride with r >= min_points. Point i
        # (finite index) uses the statistics of the last refresh r <= i, computed on x[max(0, r-W):r].
        first = -(-cfg.min_points // cfg.stride) * cfg.stride
        refresh = np.arange(first, m, cfg.stride)
        med, sig = _window_stats(x, refresh, cfg)
        idx = np.arange(m)
        which = (idx - first) // cfg.stride
        ok = idx >= first
        fmed = np.full(m, np.nan)
        fsig = np.full(m, np.nan)
        fmed[ok] = med[which[ok]]
        fsig[ok] = sig[which[ok]]
        fz = (x - fmed) / fsig
        fout = np.zeros(m, dtype=bool)
        fout[ok] = _verdict(cfg, x[ok], fmed[ok], fsig[ok])
        baseline[finite], noise[finite], z[finite] = fmed, fsig, fz
        outlier = outlier.copy()
        outlier[finite] = fout
    return OutlierScores(baseline, noise, z, outlier)


def _window_stats(x: np.ndarray, refresh: np.ndarray, cfg: OutlierConfig) -> tuple[np.ndarray, np.ndarray]:
    """Median and robust sigma of x[max(0, r - window):r] for every refresh point r."""
    W = cfg.window
    med = np.empty(len(refresh))
    sig = np.empty(len(refresh))
    full = refresh >= W
    if full.any():
        windows = np.lib.stride_tricks.sliding_window_view(x, W)[refresh[full] - W]
        mf = np.median(windows, axis=1)
        med[full] = mf
        sig[full] = MAD_TO_SIGMA * np.median(np.abs(windows - mf[:, None]), axis=1)
    for k in np.flatnonzero(~full):  # the few partial windows of the warm-up
        w = x[: refresh[k]]
        med[k] = np.median(w)
        sig[k] = MAD_TO_SIGMA * np.median(np.abs(w - med[k]))
    sig = np.maximum(sig, cfg.rel_noise_floor * np.abs(med))
    return med, sig


@dataclass
class PointVerdict:
    """Online result for one point (the scalar twin of one row of :class:`OutlierScores`)."""

    outlier: bool
    baseline: float
    noise: float
    z: float


@dataclass
class OnlineOutlier:
    """The same test, one point at a time, with checkpointable state.

    ``update(value)`` returns the verdict for that value, then takes it into the window if finite.
    """

    config: OutlierConfig = field(default_factory=OutlierConfig)
    _window: deque = field(init=False, repr=False)
    _count: int = field(init=False, default=0)
    _median: float = field(init=False, default=float("nan"))
    _noise: float = field(init=False, default=float("nan"))

    def __post_init__(self) -> None:
        self._window = deque(maxlen=self.config.window)

    def update(self, value: float) -> PointVerdict:
        """Judge ``value`` against the current baseline, then add it to the window."""
        cfg = self.config
        value = float(value)
        if not np.isfinite(value):
            return PointVerdict(True, float("nan"), float("nan"), float("nan"))
        if self._count >= cfg.min_points and self._count % cfg.stride == 0:
            w = np.fromiter(self._window, dtype=np.float64, count=len(self._window))
            self._median = float(np.median(w))
            mad = float(np.median(np.abs(w - self._median)))
            self._noise = max(MAD_TO_SIGMA * mad, cfg.rel_noise_floor * abs(self._median))
        if self._count < cfg.min_points or self._count < -(-cfg.min_points // cfg.stride) * cfg.stride:
            verdict = PointVerdict(False, float("nan"), float("nan"), float("nan"))
        else:
            out = bool(_verdict(cfg, value, self._median, self._noise))
            verdict = PointVerdict(out, self._median, self._noise, (value - self._median) / self._noise)
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
