"""Causal self-attention whose logits cannot overflow in half precision, and QK-LayerNorm.

Two ways to keep the attention logits ``q.k / sqrt(d)`` in range:

* **Pre-scaling Q and K** (``qk_prescale``): scale Q and K each by ``d ** -0.25`` *before* the
  matmul, so the product already carries the ``1/sqrt(d)`` factor. Post-scaling first forms
  ``q.k``, which in fp16 overflows (``> 65504``) as soon as ``|q.k| / sqrt(d)`` exceeds
  ``65504 / sqrt(d)`` even though the scaled logit itself would fit. The form used here
  (``torch.baddbmm(mask, q * s, (k * s)^T)``) follows OpenAI's guided-diffusion ``QKVAttention``
  ("more stable with f16 than dividing afterwards", Nichol & Dhariwal 2021) and the fused
  ``baddbmm`` of Megatron-LM / BLOOM, which fold the scale into the matmul.
* **QK-LayerNorm** (``qk_layernorm``): a LayerNorm over the head dimension on Q and on K
  (Dehghani et al. 2023, "Scaling Vision Transformers to 22 Billion Parameters"). Wortsman et al.
  2023 ("Small-scale proxies for large-scale Transformer training instabilities") show it stops
  the attention-logit growth that makes high-learning-rate runs diverge.

:class:`CausalSelfAttention` records the largest logit ``q.k / sqrt(d)`` of its last forward pass
(``last_max_logit``, a 0-d tensor, no host sync) for the diagnostics.
"""
from __future__ import annotations

from lossguard.errors import require

require("torch", "torch", "Attention with Q/K pre-scaling")

import math  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402


def scores_postscaled(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Attention logits the common way: ``(q @ k^T) / sqrt(d)``.

    Args:
        q: queries, shape ``(..., T, d)``.
        k: keys, shape ``(..., S, d)``.

    Returns:
        Logits of shape ``(..., T, S)`` in the dtype of ``q``; ``q @ k^T`` is formed unscaled
        first and can overflow in fp16 / bf16.
    """
    return (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))


def scores_prescaled(q: torch.Tensor, k: torch.Tensor,
                     bias: torch.Tensor | None = None) -> torch.Tensor:
    """Attention logits with Q and K each scaled by ``d ** -0.25`` before the matmul.

    Mathematically equal to :func:`scores_postscaled` (plus ``bias``); numerically the product
    never exceeds the final logit, so it cannot overflow where the logits themselves fit.

    Args:
        q: queries, shape ``(B, T, d)`` or ``(B, H, T, d)``.
        k: keys, shape ``(B, S, d)`` or ``(B, H, S, d)``.
        bias: optional additive mask broadcastable to ``(..., T, S)`` (``-inf`` where masked).

    Returns:
        Logits of shape ``(..., T, S)``.
    """
    s = q.size(-1) ** -0.25
    lead = q.shape[:-2]
    q3 = (q * s).reshape(-1, q.size(-2), q.size(-1))
    k3 = (k * s).reshape(-1, k.size(-2), k.size(-1))
    if bias is None:
        out = torch.bmm(q3, k3.transpose(1, 2))
    else:
        b = bias.to(q.dtype).expand(*lead, q.size(-2), k.size(-2)).reshape(-1, q.size(-2), k.size(-2))
        # baddbmm: bias + (q s)(k s)^T in one kernel, the Megatron / BLOOM form.
        out = torch.baddbmm(b, q3, k3.transpose(1, 2))
    return out.reshape(*lead, q.size(-2), k.size(-2))


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with opt-in Q/K pre-scaling and QK-LayerNorm.

    Args:
        n_embd: model width ``H``.
        n_head: number of heads; ``H`` must be divisible by it.
        bias: whether the linear layers have biases.
        dropout: dropout on attention weights and on the output.
        qk_layernorm: LayerNorm Q and K over the head dimension.
        qk_prescale: scale Q and K by ``d ** -0.25`` before the matmul instead of dividing after.
    """

    def __init__(self, n_embd: int, n_head: int, *, bias: bool = False, dropout: float = 0.0,
                 qk_layernorm: bool = False, qk_prescale: bool = False) -> None:
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"n_embd={n_embd} is not divisible by n_head={n_head}")
        self.n_head = n_head
        self.head_dim = n_embd // n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)  # output projection ("c_proj")
        self.q_norm = nn.LayerNorm(self.head_dim, bias=bias) if qk_layernorm else None
        self.k_norm = nn.LayerNorm(self.head_dim, bias=bias) if qk_layernorm else None
        self.qk_prescale = qk_prescale
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("last_max_logit", torch.zeros(()), persistent=False)
        self.register_buffer("last_head_max", torch.zeros(n_head), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend causally; ``x`` has shape ``(B, T, H)``; returns the same shape."""
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        # (B, T, C) -> (B, nh, T, hd)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        if self.q_norm is not None and self.k_norm is not None:  # both or neither
            q, k = self.q_norm(q), self.k_norm(k)
        mask = torch.full((T, T), float("-inf"), device=x.device, dtype=q.dtype).triu(1)
        if self.qk_prescale:
            att = scores_prescaled(q, k, mask)
        else:
            att = scores_postscaled(q, k) + mask
        # largest attention logit q.k/sqrt(d) (masked entries are -inf and drop out of the max):
        # the statistic whose growth Wortsman et al. 2023 track; one reduction, no host sync.
        self.last_head_max = att.detach().amax(dim=(0, 2, 3)).float()  # per head, for QK-clip
        self.last_max_logit = self.last_head_max.amax()
        att = self.dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.dropout(self.c_proj(y))
