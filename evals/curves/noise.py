"""Noise models for generated loss curves: what the logged loss does around its trend.

Each model returns noise in units of one "noise scale" (its robust spread is about 1), so a family
can set the spread separately. Real loss logs are rarely Gaussian: per-batch losses have heavy
tails (hard batches), are correlated from step to step (data order, curriculum, smoothing by the
logger), grow and shrink with the loss itself, and come in bursts (a bad shard).
"""
from __future__ import annotations

from enum import Enum

import numpy as np


class NoiseModel(str, Enum):
    """How the logged loss scatters around its trend."""

    GAUSSIAN = "gaussian"
    """Independent normal noise."""
    STUDENT_T = "student_t"
    """Independent Student-t noise with 2.5-4 degrees of freedom: rare large outliers are normal."""
    AR1 = "ar1"
    """AR(1) correlated noise, phi in [0.6, 0.95]: slow wanders that are not events."""
    MULTIPLICATIVE = "multiplicative"
    """Heteroscedastic: the spread is proportional to the loss (relative to its final value)."""
    BURSTY = "bursty"
    """Gaussian with rare short bursts of 3-6x larger spread (a noisy shard)."""


HEAVY_TAIL_OUTLIER_SIGMA = 6.0
"""A heavy-tailed or bursty noise point this many robust sigmas out is labelled "don't care":
no detector can tell it from a one-point spike, and the protocol neither rewards nor punishes it."""


def sample_noise(model: NoiseModel, rng: np.random.Generator, n: int, *,
                 level: np.ndarray | None = None) -> np.ndarray:
    """Draw ``n`` noise values with a robust spread of about 1.

    Args:
        model: the noise model.
        rng: the random generator (the only source of randomness).
        n: how many logged points.
        level: the noiseless loss at each point; used by :attr:`NoiseModel.MULTIPLICATIVE` to
            scale the spread (relative to the last value, so the end of the run has spread 1).

    Returns:
        The noise, shape ``(n,)``.
    """
    if model is NoiseModel.GAUSSIAN:
        return rng.standard_normal(n)
    if model is NoiseModel.STUDENT_T:
        df = rng.uniform(2.5, 4.0)
        # Student-t's IQR is wider than the normal's; rescale so the bulk has spread ~1.
        return rng.standard_t(df, n) / (1.0 + 0.6 / df)
    if model is NoiseModel.AR1:
        phi = rng.uniform(0.6, 0.95)
        eps = rng.standard_normal(n) * np.sqrt(1 - phi * phi)
        out = np.empty(n)
        prev = rng.standard_normal()
        for i in range(n):  # n <= ~20k logged points; a loop is clear and fast enough
            prev = phi * prev + eps[i]
            out[i] = prev
        return out
    if model is NoiseModel.MULTIPLICATIVE:
        base = rng.standard_normal(n)
        if level is None:
            return base
        rel = np.asarray(level, float) / max(float(level[-1]), 1e-9)
        return base * np.clip(rel, 0.3, 4.0)
    if model is NoiseModel.BURSTY:
        out = rng.standard_normal(n)
        n_bursts = rng.poisson(max(1.0, n / 2000))
        for _ in range(n_bursts):
            start = int(rng.integers(0, n))
            width = int(rng.integers(2, 8))
            out[start:start + width] *= rng.uniform(3, 6)
        return out
    raise ValueError(f"unknown noise model {model!r}")


def outlier_points(noise: np.ndarray) -> np.ndarray:
    """Indices where the noise itself is an upward outlier (see :data:`HEAVY_TAIL_OUTLIER_SIGMA`)."""
    med = np.median(noise)
    mad = 1.4826 * np.median(np.abs(noise - med)) or 1.0
    return np.flatnonzero((noise - med) / mad > HEAVY_TAIL_OUTLIER_SIGMA)
