"""Robust statistics of a trailing window, computed for many windows at once with numpy.

The MAD estimator of sigma (:data:`MAD_TO_SIGMA`) and its form for first differences
(:data:`DIFF_TO_SIGMA`), which a trend does not inflate; row medians by one in-place partition; and
the medians of growing prefixes while a window fills. :func:`lossguard.detect.outlier.score_finite`
(the whole-log path of the outlier test) uses :func:`window_stats`; other detectors use the constants.
"""
from __future__ import annotations

import numpy as np

MAD_TO_SIGMA = 1.4826  # 1 / Phi^-1(3/4): MAD -> standard deviation for Gaussian noise
"""Median absolute deviation -> standard deviation, for Gaussian noise (1 / Phi^-1(3/4))."""
DIFF_TO_SIGMA = MAD_TO_SIGMA / np.sqrt(2.0)  # median |x[t] - x[t-1]| -> sigma (a difference has sqrt(2) sigma)
"""Median absolute first difference -> standard deviation (a difference has sqrt(2) sigma)."""


def median_rows_inplace(a: np.ndarray) -> np.ndarray:
    """Row medians via one in-place partition (``a`` is a scratch copy; np.median would copy again)."""
    k = a.shape[1]
    if k % 2:
        a.partition(k // 2, axis=1)
        return a[:, k // 2].copy()
    a.partition([k // 2 - 1, k // 2], axis=1)
    return 0.5 * (a[:, k // 2 - 1] + a[:, k // 2])


def prefix_medians(v: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """np.median(v[:L]) for every L in ``lengths`` (all >= 1), from one sort of +inf-padded prefixes."""
    top = int(lengths.max())
    pad = np.full((len(lengths), top), np.inf)
    cols = np.arange(top)
    mask = cols[None, :] < lengths[:, None]
    pad[mask] = np.broadcast_to(v[:top], pad.shape)[mask]
    pad.sort(axis=1)
    rows = np.arange(len(lengths))
    return 0.5 * (pad[rows, (lengths - 1) // 2] + pad[rows, lengths // 2])


def window_stats(x: np.ndarray, refresh: np.ndarray, *, window: int,
                 rel_noise_floor: float) -> tuple[np.ndarray, np.ndarray]:
    """Median and robust sigma of ``x[max(0, r - window):r]`` for every refresh count ``r``.

    Sigma is :data:`DIFF_TO_SIGMA` times the median absolute first difference, floored at
    ``rel_noise_floor * |median|``.
    """
    W = window
    med = np.empty(len(refresh))
    sig = np.empty(len(refresh))
    full = refresh >= W
    if full.any():
        starts = refresh[full] - W
        med[full] = median_rows_inplace(np.lib.stride_tricks.sliding_window_view(x, W)[starts])
        absd = np.abs(np.diff(x))
        sig[full] = DIFF_TO_SIGMA * median_rows_inplace(
            np.lib.stride_tricks.sliding_window_view(absd, W - 1)[starts])
    part = ~full
    if part.any():  # the growing windows x[:r] while the window fills (fewer than `window` of them)
        r = refresh[part]
        med[part] = prefix_medians(x, r)
        sig[part] = DIFF_TO_SIGMA * prefix_medians(np.abs(np.diff(x[:int(r.max())])), r - 1)
    sig = np.maximum(sig, rel_noise_floor * np.abs(med))
    return med, sig


SMOOTHED_RATIO = 1.22
""":func:`is_smoothed` threshold on ``median|x[t] - x[t-2]| / median|x[t] - x[t-1]|``: 1 for
independent noise around a trend (the first differences anticorrelate, lag-1 correlation -0.5),
sqrt(2) for a running or moving mean or an EMA (each point carries the last one's noise: correlation
0 or above). The threshold sits at correlation -0.25, sqrt(1.5)."""


def is_smoothed(x: np.ndarray) -> bool:
    """True when the points of ``x`` are not independent draws around a trend but a running mean of
    them (kohya's ``avr_loss``, a TensorBoard-smoothed export): two-step differences are
    :data:`SMOOTHED_RATIO` times the one-step ones or more. Such a series' point-to-point noise
    understates how far it wanders."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if len(x) < 8:
        return False
    one = float(np.median(np.abs(np.diff(x))))
    two = float(np.median(np.abs(x[2:] - x[:-2])))
    return one > 0 and two >= SMOOTHED_RATIO * one
