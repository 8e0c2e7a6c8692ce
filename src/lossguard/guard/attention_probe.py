"""The largest attention logit of every head, read from the attention modules of any model.

Wortsman et al. 2023 ("Small-scale proxies for large-scale Transformer training instabilities",
section 3.1) tie high-learning-rate instability to the growth of the attention logits
``q.k / sqrt(d)``: they grow without bound, the softmax collapses to one-hot and the loss stalls.
Kimi K2's MuonClip (Moonshot AI 2025) caps the same per-head maximum by rescaling W_q and W_k.

One :class:`AttentionProbe` per attention module knows two things: the per-head largest logit of the
module's last forward pass (a device tensor of shape ``(n_head,)``; no host sync), and where that
head's query and key weights are (:meth:`AttentionProbe.qk_slices`, used by
:mod:`lossguard.techniques.qk_clip`). Supported automatically:

* lossguard's :class:`~lossguard.techniques.attention.CausalSelfAttention` (it records the maximum
  itself while it attends: free);
* ``torch.nn.MultiheadAttention``, Hugging Face's ``GPT2Attention`` and HF's Llama-family attention
  (Llama, Mistral, Qwen, Gemma, ...: rotary embeddings, grouped KV heads; :mod:`.hf_llama_attention`)
  -- a forward hook recomputes ``q k^T`` from the module's input (SDPA never materialises it),
  by default for one query position in four against every key (``query_stride``; a lower bound of
  the maximum, fresh every step, at ~1/4 of the full recompute: :mod:`.logit_recompute`);
* any attention of your own, with one line in its ``forward``: ``record_attention_logits(self, att)``
  on the pre-softmax logits.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from . import hf_llama_attention as llama
from . import logit_recompute as lr
from .hf_llama_attention import is_llama_attention
from .logit_recompute import QUERY_STRIDE

if TYPE_CHECKING:
    from ..techniques.attention import CausalSelfAttention

HEAD_MAX_ATTR = "_lossguard_head_max"
"""Attribute where a module's per-head largest logit of its last forward pass is kept."""


def record_attention_logits(module: nn.Module, logits: torch.Tensor) -> None:
    """Record the per-head largest pre-softmax logit of ``module``'s forward pass (one line in your
    own attention: ``record_attention_logits(self, att)``).

    Args:
        module: the attention module (the probe reads it back from here).
        logits: pre-softmax logits, ``(B, H, T, S)`` (masked entries ``-inf``), or ``(B, T, S)`` for
            one head. Detached; one reduction on the device, no host sync.
    """
    with torch.no_grad():
        x = logits.detach()
        head = x.amax(dim=(0, 2, 3)) if x.dim() == 4 else x.amax().reshape(1)
        setattr(module, HEAD_MAX_ATTR, head.float())


class AttentionProbe:
    """Reads one attention module's per-head largest logit and locates its Q/K weights.

    Args:
        module: the attention module.
        name: its qualified name in the model (for the log).
        every: for the hook-based kinds, recompute the logits on every ``every``-th forward only
            (the last value is kept between); 1 = every forward. It counts forwards, not steps
            (under gradient accumulation it picks micro-batches), and a held value is read like a
            fresh one: :class:`~lossguard.guard.treatment.PrecursorTreatment` would QK-clip a head
            again on the value its weights had before the last clip. ``query_stride`` thins the
            cost instead, with a value measured on every forward.
        query_stride: for the hook-based kinds, the logits of every ``query_stride``-th query
            position are recomputed (against every key), at an offset that turns with each training
            forward: a lower bound of the largest logit, measured afresh each step, at about
            ``1 / query_stride`` of the full recompute's cost (:mod:`.logit_recompute`, with the
            measurements). 1 = every position (exact). The shipped attention and ``recorded``
            modules see every logit anyway and ignore it.
    """

    def __init__(self, module: nn.Module, name: str, *, every: int = 1, query_stride: int = QUERY_STRIDE) -> None:
        self.module, self.name, self.every = module, name, max(1, int(every))
        self.query_stride = max(1, int(query_stride))
        self._kind = self._find_kind()  # once: head_max() runs every step
        self.n_head = self._n_head()
        self._calls = 0
        self._turn = 0  # training forwards measured: turns the offset of the query rows read
        self._handle = None
        setattr(module, HEAD_MAX_ATTR, torch.zeros(self.n_head, device=self._device()))
        if self.kind in ("mha", "gpt2", "llama"):
            self._handle = module.register_forward_hook(self._hook, with_kwargs=True)

    # ------------------------------------------------------------------ kinds
    @property
    def kind(self) -> str:
        """``shipped``, ``mha``, ``gpt2``, ``llama`` or ``recorded`` (a user's module calling
        record_attention_logits)."""
        return self._kind

    def _find_kind(self) -> str:
        from ..techniques.attention import CausalSelfAttention

        m = self.module
        if isinstance(m, CausalSelfAttention):
            return "shipped"
        if isinstance(m, nn.MultiheadAttention):
            return "mha"
        if type(m).__name__ == "GPT2Attention" and hasattr(m, "c_attn"):
            return "gpt2"
        if is_llama_attention(m):
            return "llama"
        return "recorded"

    def _n_head(self) -> int:
        m = self.module
        if is_llama_attention(m):
            return llama.n_heads(m)
        for attr in ("n_head", "num_heads", "num_attention_heads"):
            if isinstance(getattr(m, attr, None), int):
                return int(getattr(m, attr))
        return 1

    def _device(self):
        p = next(self.module.parameters(), None)
        return p.device if p is not None else torch.device("cpu")

    def remove(self) -> None:
        """Detach the forward hook (if any)."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    # ------------------------------------------------------------------ reading
    def head_max(self) -> torch.Tensor:
        """Per-head largest logit of the last forward pass, shape ``(n_head,)``, on the device."""
        m = self.module
        if self._kind == "shipped":
            return cast("CausalSelfAttention", m).last_head_max
        return getattr(m, HEAD_MAX_ATTR)

    def _hook(self, module, args, kwargs, output) -> None:
        self._calls += 1
        if not module.training or (self._calls - 1) % self.every:
            return
        with torch.no_grad():
            if self.kind == "llama":
                head = self._llama(args, kwargs)
            else:
                head = self._mha(args, kwargs) if self.kind == "mha" else self._gpt2(args, kwargs)
        self._turn += 1
        setattr(module, HEAD_MAX_ATTR, head)

    def _rows(self, t: int) -> slice:
        return lr.query_rows(t, self.query_stride, self._turn)

    def _llama(self, args, kwargs) -> torch.Tensor:
        m: Any = self.module
        t = (args[0] if args else kwargs["hidden_states"]).shape[-2]
        rows = self._rows(t)
        q, k, causal = llama.queries_keys(m, args, kwargs, rows)
        bias = lr.causal_bias(rows, t, k.shape[-2], q.device, q.dtype) if causal else None
        return lr.head_max(q, k, m.scaling, bias)

    def _mha(self, args, kwargs) -> torch.Tensor:
        m = cast(nn.MultiheadAttention, self.module)  # kind "mha"
        q_in = args[0] if args else kwargs["query"]
        k_in = args[1] if len(args) > 1 else kwargs["key"]
        if not m.batch_first and q_in.dim() == 3:
            q_in, k_in = q_in.transpose(0, 1), k_in.transpose(0, 1)
        if q_in.dim() == 2:
            q_in, k_in = q_in.unsqueeze(0), k_in.unsqueeze(0)
        e, h = m.embed_dim, m.num_heads
        if m._qkv_same_embed_dim:
            wq, wk = m.in_proj_weight[:e], m.in_proj_weight[e:2 * e]
        else:
            wq, wk = m.q_proj_weight, m.k_proj_weight
        bq = bk = None
        if m.in_proj_bias is not None:
            bq, bk = m.in_proj_bias[:e], m.in_proj_bias[e:2 * e]
        T, S = q_in.shape[1], k_in.shape[1]
        rows = self._rows(T)
        q = nn.functional.linear(q_in.detach()[:, rows], wq, bq)  # only the rows read are projected
        k = nn.functional.linear(k_in.detach(), wk, bk)
        B, Tr, _ = q.shape
        q = q.view(B, Tr, h, e // h).transpose(1, 2)
        k = k.view(B, S, h, e // h).transpose(1, 2)
        mask = kwargs.get("attn_mask", args[5] if len(args) > 5 else None)
        bias = None
        if kwargs.get("is_causal", False) and mask is None:
            bias = lr.causal_bias(rows, T, S, q.device, q.dtype)
        elif mask is not None and mask.dim() == 2:
            bias = lr.mask_bias(~mask if mask.dtype == torch.bool else torch.isfinite(mask), rows, q.dtype)
        return lr.head_max(q, k, 1.0 / math.sqrt(e // h), bias)

    def _gpt2(self, args, kwargs) -> torch.Tensor:
        m: Any = self.module  # HF's GPT2Attention, read by attribute name (transformers is optional)
        hidden = (args[0] if args else kwargs["hidden_states"]).detach()
        B, T, _ = hidden.shape
        rows = self._rows(T)
        ca, e = m.c_attn, m.split_size
        if ca._forward_hooks or ca._forward_pre_hooks:  # they (add_qk_norm's) shape q and k: call it
            q, k, _ = ca(hidden).split(e, dim=2)
            q = q[:, rows]
        else:  # Conv1D, y = x W + b: q of the rows read and k only (no v)
            hq, C = hidden[:, rows], hidden.shape[-1]  # addmm as Conv1D does (autocast casts it alike)
            q = torch.addmm(ca.bias[:e], hq.reshape(-1, C), ca.weight[:, :e]).view(B, -1, e)
            k = torch.addmm(ca.bias[e:2 * e], hidden.reshape(-1, C), ca.weight[:, e:2 * e]).view(B, T, e)
        q = q.reshape(B, -1, m.num_heads, m.head_dim).transpose(1, 2)
        k = k.view(B, T, m.num_heads, m.head_dim).transpose(1, 2)
        bias = lr.causal_bias(rows, T, T, q.device, q.dtype) if m.is_causal else None
        return lr.head_max(q, k, m.scaling, bias)

    # ------------------------------------------------------------------ weights
    def qk_slices(self, head: int) -> list[tuple[torch.Tensor, int, slice]]:
        """Where head ``head``'s query and key projections live: ``(tensor, dim, index)`` triples
        (weights and biases) such that scaling ``tensor.narrow(dim, ...)`` by ``s`` scales that
        head's q (or k) by ``s``. Empty for a kind whose layout is unknown (``recorded``)."""
        m: Any = self.module  # its layout depends on the kind: attributes are read by name
        kind = self.kind
        if kind == "shipped":
            e, hd = m.c_proj.in_features, m.head_dim
            out = [(m.c_attn.weight, 0, slice(o + head * hd, o + (head + 1) * hd)) for o in (0, e)]
            if m.c_attn.bias is not None:
                out += [(m.c_attn.bias, 0, slice(o + head * hd, o + (head + 1) * hd)) for o in (0, e)]
            return out
        if kind == "mha":
            e = m.embed_dim
            hd = e // m.num_heads
            if m._qkv_same_embed_dim:
                out = [(m.in_proj_weight, 0, slice(o + head * hd, o + (head + 1) * hd)) for o in (0, e)]
            else:
                out = [(w, 0, slice(head * hd, (head + 1) * hd)) for w in (m.q_proj_weight, m.k_proj_weight)]
            if m.in_proj_bias is not None:
                out += [(m.in_proj_bias, 0, slice(o + head * hd, o + (head + 1) * hd)) for o in (0, e)]
            return out
        if kind == "llama":
            return llama.qk_slices(m, head)
        if kind == "gpt2":  # Conv1D: y = x @ W + b, W of shape (in, 3 * embed): columns
            e, hd = m.embed_dim, m.head_dim
            out = [(m.c_attn.weight, 1, slice(o + head * hd, o + (head + 1) * hd)) for o in (0, e)]
            out += [(m.c_attn.bias, 0, slice(o + head * hd, o + (head + 1) * hd)) for o in (0, e)]
            return out
        return []


def find_attention(model: nn.Module, *, every: int = 1, query_stride: int = QUERY_STRIDE) -> list[AttentionProbe]:
    """Probes for every attention module of ``model`` that lossguard can read: the shipped one,
    ``nn.MultiheadAttention``, HF ``GPT2Attention`` and Llama-family attention, and any module that
    has called (or will call) :func:`record_attention_logits` -- mark those beforehand with
    :func:`mark_attention`.

    Args:
        model: the model (a DDP wrapper is unwrapped).
        every, query_stride: see :class:`AttentionProbe`.
    """
    from ..techniques.attention import CausalSelfAttention

    model = getattr(model, "module", model)
    probes = []
    for name, m in model.named_modules():
        if isinstance(m, (CausalSelfAttention, nn.MultiheadAttention)) or hasattr(m, HEAD_MAX_ATTR) \
                or (type(m).__name__ == "GPT2Attention" and hasattr(m, "c_attn")) or is_llama_attention(m):
            probes.append(AttentionProbe(m, name, every=every, query_stride=query_stride))
    return probes


def mark_attention(module: nn.Module, n_head: int = 1) -> nn.Module:
    """Mark a user's attention module as one that calls :func:`record_attention_logits`, so
    :func:`find_attention` finds it before its first forward pass. Returns the module."""
    p = next(module.parameters(), None)
    setattr(module, HEAD_MAX_ATTR, torch.zeros(n_head, device=p.device if p is not None else "cpu"))
    return module


def describe(probes: list[AttentionProbe]) -> list[dict[str, Any]]:
    """``{"name", "kind", "n_head"}`` of every probe (for the log's header), and for the kinds that
    recompute, ``"query_stride"`` (above 1: their logged maxima are lower bounds) and ``"every"``."""
    out: list[dict[str, Any]] = []
    for p in probes:
        d: dict[str, Any] = {"name": p.name, "kind": p.kind, "n_head": p.n_head}
        if p.kind in ("mha", "gpt2", "llama"):
            d.update(query_stride=p.query_stride, every=p.every)
        out.append(d)
    return out
