"""QK-LayerNorm and z-loss as drop-ins for a model you already have.

Wortsman et al. 2023 ("Small-scale proxies for large-scale Transformer training instabilities")
show QK-LayerNorm (Dehghani et al. 2023) stops attention-logit growth and PaLM's z-loss stops
output-logit divergence; together they make a small model's final loss ~3x less sensitive to the LR
(issue 20: 0.13 vs 0.38). lossguard's own attention has them behind flags
(:class:`~lossguard.techniques.attention.CausalSelfAttention`); here they are for anyone else's:

* :func:`qk_layernorm` -- a function on your own ``q`` and ``k`` (one line in your attention);
* :func:`add_qk_norm` -- a wrapper that adds learnable per-head LayerNorms to an existing model's
  attention without touching its code, through forward hooks on the projections: modules with
  ``q_proj`` / ``k_proj`` (Llama, Mistral, OPT, ... -- before rotary embeddings, as OLMo 2 and
  Qwen3 place it) and Hugging Face ``GPT2Attention`` (its fused ``c_attn``);
* :class:`ZLossTap` -- the z-loss of any output layer's logits, collected by a hook:
  ``loss = ce + tap.pop()``.
"""
from __future__ import annotations

from lossguard.errors import require

require("torch", "torch", "QK-LayerNorm")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from .z_loss import DEFAULT_COEF, z_loss  # noqa: E402


def qk_layernorm(q: torch.Tensor, k: torch.Tensor, q_norm: nn.Module | None = None,
                 k_norm: nn.Module | None = None, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """LayerNorm ``q`` and ``k`` over their last (head) dimension.

    Args:
        q, k: ``(..., head_dim)``, e.g. ``(B, H, T, d)``.
        q_norm, k_norm: learnable norms to use (e.g. ``nn.LayerNorm(d)``); None = parameter-free.
        eps: the parameter-free norm's epsilon.

    Returns:
        ``(q, k)`` normalised; their dot products are then bounded by ``d`` times the norms' gains.
    """
    d = q.size(-1)
    q = q_norm(q) if q_norm is not None else F.layer_norm(q, (d,), eps=eps)
    k = k_norm(k) if k_norm is not None else F.layer_norm(k, (d,), eps=eps)
    return q, k


class _HeadNorm(nn.Module):
    """Per-head LayerNorm of a projection output ``(..., H * d)`` (hooked on the projection)."""

    def __init__(self, n_head: int, head_dim: int) -> None:
        super().__init__()
        self.n_head, self.head_dim = n_head, head_dim
        self.norm = nn.LayerNorm(head_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        return self.norm(x.view(*shape[:-1], -1, self.head_dim)).view(shape)


def _gpt2_hook(qn: _HeadNorm, kn: _HeadNorm, split: int):
    def hook(module, args, out):
        q, k, v = out.split(split, dim=-1)
        return torch.cat([qn(q), kn(k), v], dim=-1)
    return hook


def add_qk_norm(model: nn.Module) -> list[str]:
    """Add learnable per-head QK-LayerNorm to every attention of ``model`` that lossguard can find.

    The norms are registered as submodules (``qk_norm_q`` / ``qk_norm_k`` of each attention), so
    they are trained, saved and moved with the model. Call before building the optimizer.

    Returns:
        The qualified names of the attention modules changed (a clear error when there is none).
    """
    from ..errors import LossguardError

    done = []
    for name, m in list(model.named_modules()):
        n_head = next((getattr(m, a) for a in ("num_heads", "n_head", "num_attention_heads")
                       if isinstance(getattr(m, a, None), int)), None)
        if hasattr(m, "q_proj") and hasattr(m, "k_proj") and isinstance(m.q_proj, nn.Linear):
            hd = getattr(m, "head_dim", None) or m.q_proj.out_features // (n_head or 1)
            n_q, n_k = m.q_proj.out_features // hd, m.k_proj.out_features // hd  # grouped-query: fewer k heads
            m.qk_norm_q, m.qk_norm_k = _HeadNorm(n_q, hd), _HeadNorm(n_k, hd)
            m.q_proj.register_forward_hook(lambda mod, a, out, n=m.qk_norm_q: n(out))
            m.k_proj.register_forward_hook(lambda mod, a, out, n=m.qk_norm_k: n(out))
            done.append(name)
        elif (type(m).__name__ == "GPT2Attention" and hasattr(m, "c_attn")
              and not getattr(m, "is_cross_attention", False)):
            m.qk_norm_q, m.qk_norm_k = _HeadNorm(m.num_heads, m.head_dim), _HeadNorm(m.num_heads, m.head_dim)
            m.c_attn.register_forward_hook(_gpt2_hook(m.qk_norm_q, m.qk_norm_k, m.split_size))
            done.append(name)
    if not done:
        raise LossguardError("add_qk_norm found no attention it knows (modules with q_proj/k_proj, or "
                             "GPT2Attention)",
                             fix="call qk_layernorm(q, k) inside your own attention instead")
    p = next(model.parameters())
    for name in done:
        model.get_submodule(name).to(device=p.device)
    return done


class ZLossTap:
    """Collects PaLM's z-loss of an output layer's logits through a forward hook.

    ``tap = ZLossTap(model.lm_head)``, then ``loss = ce + tap.pop()`` each step.

    Args:
        module: the layer whose output is the logits ``(..., V)``.
        coef: the coefficient (PaLM: 1e-4).
    """

    def __init__(self, module: nn.Module, coef: float = DEFAULT_COEF) -> None:
        self.coef = coef
        self._term: torch.Tensor | None = None
        self._handle = module.register_forward_hook(self._hook)

    def _hook(self, module, args, out) -> None:
        if module.training:
            term = z_loss(out, self.coef)
            self._term = term if self._term is None else self._term + term

    def pop(self) -> torch.Tensor:
        """The z-loss of the forward passes since the last call (0 when there was none)."""
        term, self._term = self._term, None
        return term if term is not None else torch.zeros(())

    def remove(self) -> None:
        """Detach the hook."""
        self._handle.remove()
