"""Hugging Face Llama-family attention: the largest logit per head and where each head's Q/K live.

The family (Llama, Mistral, Qwen2/3, Gemma, OLMo, ... in ``transformers``): ``q_proj`` / ``k_proj``
linear projections into heads of ``head_dim``, rotary position embeddings applied to q and k (passed
to the module's forward as ``position_embeddings=(cos, sin)``), key/value heads shared by
``num_key_value_groups`` query heads (grouped-query attention), optional per-head ``q_norm`` /
``k_norm`` (Qwen3), logits ``q.k * scaling``. Recognised by those attributes (not by class name, so
every model of the family is covered); the logits are recomputed from the module's input in a
forward hook (:class:`~lossguard.guard.attention_probe.AttentionProbe`): two projections and one
score matmul per layer, over a subset of the query positions (:mod:`.logit_recompute`).
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn


def is_llama_attention(m: nn.Module) -> bool:
    """True for a module shaped like Hugging Face's Llama-family attention."""
    return (isinstance(getattr(m, "q_proj", None), nn.Linear) and isinstance(getattr(m, "k_proj", None), nn.Linear)
            and isinstance(getattr(m, "head_dim", None), int) and isinstance(getattr(m, "scaling", None), float)
            and isinstance(getattr(m, "num_key_value_groups", None), int))


def n_heads(m: Any) -> int:
    """Number of query heads."""
    return int(m.q_proj.out_features // m.head_dim)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoFormer's rotation (the ``rotate_half`` form HF uses); a partial rotary (``cos`` narrower
    than the head) turns the leading dimensions only."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # (B, T, d) -> (B, 1, T, d): every head
    d = cos.shape[-1]
    if d == x.shape[-1]:
        return x * cos + _rotate_half(x) * sin
    rot, rest = x[..., :d], x[..., d:]
    return torch.cat((rot * cos + _rotate_half(rot) * sin, rest), dim=-1)


def queries_keys(m: Any, args: tuple, kwargs: dict,
                 rows: slice = slice(None)) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """``(q (B, H, T', d), k (B, Hkv, T, d), causal)`` of the module's forward with these inputs, the
    queries of the positions ``rows`` only (their rotary angles theirs), the key heads not repeated
    (:func:`lossguard.guard.logit_recompute.head_max` pairs each with its group)."""
    hidden = (args[0] if args else kwargs["hidden_states"]).detach()
    hd = m.head_dim
    hq = hidden[..., rows, :]
    # through the projections as modules: their hooks (add_qk_norm's) shape q and k
    q, k = m.q_proj(hq).view(*hq.shape[:-1], -1, hd), m.k_proj(hidden).view(*hidden.shape[:-1], -1, hd)
    if isinstance(getattr(m, "q_norm", None), nn.Module):
        q, k = m.q_norm(q), m.k_norm(k)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    pe = kwargs.get("position_embeddings", args[1] if len(args) > 1 else None)
    if pe is not None:
        cos, sin = pe
        q = _rotary(q, cos[..., rows, :].to(q.dtype), sin[..., rows, :].to(q.dtype))
        k = _rotary(k, cos.to(k.dtype), sin.to(k.dtype))
    return q, k, bool(getattr(m, "is_causal", True))


def qk_slices(m: Any, head: int) -> list[tuple[torch.Tensor, int, slice]]:
    """Head ``head``'s query rows and its key/value group's key rows (weights and biases). Under
    grouped-query attention the key rows are shared, so a clip also shrinks the group's other
    heads (conservative). Empty with ``q_norm`` / ``k_norm``: the projections' scale does not reach
    the logits, and QK-clip cannot act (the norms already bound them)."""
    if isinstance(getattr(m, "q_norm", None), nn.Module):
        return []
    hd, kv = m.head_dim, head // m.num_key_value_groups
    out: list[tuple[torch.Tensor, int, slice]] = []
    for proj, i in ((m.q_proj, head), (m.k_proj, kv)):
        rows = slice(i * hd, (i + 1) * hd)
        out.append((proj.weight, 0, rows))
        if proj.bias is not None:
            out.append((proj.bias, 0, rows))
    return out
