"""PaLM's z-loss: ``coef * log(Z)^2`` with ``Z`` the softmax normaliser of the output logits.

Chowdhery et al. 2022 ("PaLM: Scaling Language Modeling with Pathways", section 5) add
``1e-4 * log(Z)^2`` to the loss "to encourage the softmax normalizer log(Z) to be close to 0, which
we found increases the stability of training". Wortsman et al. 2023 show it prevents the output
logit divergence of small-scale proxies. Gradient w.r.t. the logits of one position:
``2 * coef * log(Z) * softmax(logits)``.
"""
from __future__ import annotations

from lossguard.errors import require

require("torch", "torch", "The z-loss")

import torch  # noqa: E402

#: PaLM's coefficient.
DEFAULT_COEF = 1e-4


def z_loss(logits: torch.Tensor, coef: float = DEFAULT_COEF, *,
           ignore_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over positions of ``coef * logsumexp(logits)^2``.

    Args:
        logits: shape ``(..., V)``; computed in float32 for stability.
        coef: the coefficient (PaLM: 1e-4).
        ignore_mask: optional bool tensor of shape ``logits.shape[:-1]``, ``True`` where a position
            is padding and must not count.

    Returns:
        A 0-d tensor.
    """
    log_z = torch.logsumexp(logits.float(), dim=-1)
    sq = log_z.square()
    if ignore_mask is not None:
        keep = ~ignore_mask
        return coef * sq[keep].sum() / keep.sum().clamp_min(1)
    return coef * sq.mean()
