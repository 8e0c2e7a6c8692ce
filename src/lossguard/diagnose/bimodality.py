"""Distribution statistics for Adam updates: bimodality coefficient and time-domain correlation.

Molybog et al. 2023 ("A Theory on Adam Instability in Large-Scale Machine Learning") describe the
per-coordinate Adam update ``r = m_hat / (sqrt(v_hat) + eps)`` of a layer in two regimes: when
gradient entries are large against ``eps`` and uncorrelated in time, ``|r|`` piles up near 1 and the
distribution of ``r`` is **bimodal** (peaks at +1 and -1: Adam acts as sign descent, with a large
update norm that is nearly uncorrelated with the descent direction, the state they tie to
divergence); when entries fall below ``eps``, ``r`` collapses towards 0 (unimodal). A layer
flipping between the two is the signature before a spike.

* :func:`bimodality_coefficient` is Sarle's coefficient
  ``b = (g^2 + 1) / (k + 3 (n - 1)^2 / ((n - 2)(n - 3)))`` with ``g`` the sample skewness and ``k`` the
  sample excess kurtosis (SAS Institute 1990; Pfister et al. 2013, "Good things peak in pairs").
  ``b > 5/9`` (the value of a uniform distribution) suggests bimodality; a normal gives 1/3, a
  symmetric two-point distribution 1.
* :func:`time_correlation` is the cosine between a layer's updates at consecutive steps.
"""
from __future__ import annotations

#: Sarle's threshold: the bimodality coefficient of the uniform distribution.
BIMODAL_THRESHOLD = 5.0 / 9.0


def bimodality_coefficient(x):
    """Sarle's bimodality coefficient of the entries of ``x`` (a torch tensor); 0-d tensor.

    Uses the bias-corrected sample skewness and excess kurtosis; needs at least 4 entries (returns
    NaN otherwise, and for a constant tensor).
    """
    import torch

    x = x.detach().flatten().double()
    n = x.numel()
    if n < 4:
        return torch.tensor(float("nan"), dtype=torch.float64, device=x.device)
    d = x - x.mean()
    m2 = d.square().mean()
    m3 = (d ** 3).mean()
    m4 = (d ** 4).mean()
    g1 = m3 / m2 ** 1.5
    g2 = m4 / m2 ** 2 - 3.0
    # bias-corrected sample skewness (G1) and excess kurtosis (G2)
    skew = g1 * (n * (n - 1)) ** 0.5 / (n - 2)
    kurt = ((n + 1) * g2 + 6) * (n - 1) / ((n - 2) * (n - 3))
    return (skew ** 2 + 1) / (kurt + 3.0 * (n - 1) ** 2 / ((n - 2) * (n - 3)))


def is_bimodal(x, threshold: float = BIMODAL_THRESHOLD) -> bool:
    """Whether the bimodality coefficient of ``x`` exceeds ``threshold`` (host sync)."""
    return bool(bimodality_coefficient(x) > threshold)


def time_correlation(prev, cur):
    """Cosine similarity of two update tensors of one layer (0-d tensor; 0 if either is zero)."""
    import torch

    a, b = prev.detach().flatten().double(), cur.detach().flatten().double()
    den = a.norm() * b.norm()
    return torch.where(den > 0, (a @ b) / torch.where(den > 0, den, 1.0), torch.zeros_like(den))
