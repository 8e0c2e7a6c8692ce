"""The per-head largest attention logit, recomputed from the queries of a subset of positions.

The hook-based probes (``nn.MultiheadAttention``, HF ``GPT2Attention``, HF Llama-family attention;
:class:`~lossguard.guard.attention_probe.AttentionProbe`) cannot read the logits from the attention
itself: SDPA never materialises them. They recompute ``q k^T`` from the module's input, and that
recompute is most of what the precursor statistics cost on such a model: +32% of a step over the
guard alone on one H200 (12 ``nn.TransformerEncoderLayer`` of width 768, batch 8 x 1024, bf16,
``benchmarks/RESULTS.md``, "gpu_session.sh").

Two things make it cheap (``benchmarks/probe_cost.py``, "Recomputing probes, session 8" in
``benchmarks/RESULTS.md``):

* **Fewer passes over the scores** (exact): the mask is the additive ``bias`` of one ``baddbmm``
  (no ``masked_fill`` copy), the positive scale multiplies the ``(n_head,)`` result after the max
  (not the ``(B, H, T, S)`` scores), only q and k are projected (GPT-2's fused projection also made
  v), and grouped key heads are not repeated (each key head meets its group's queries in one matmul).
* **Every ``stride``-th query position** (:data:`QUERY_STRIDE`), at an offset that turns with every
  training forward (``offset, offset + stride, ...``; the next forward starts one further), against
  every key. The result is a lower bound of the full maximum, measured afresh on every step: the
  treatment's triggers need no notion of a held value, and over ``stride`` forwards every position
  is read. Measured on HF GPT-2 and Llama trained on two texts at stable and diverging LRs: the
  step's largest logit (what the growth test, ``analyze`` and the log read) is read at 0.97-1.00
  of the exact one in the median and at least 0.73 in the runs that grew; the growth test fired on
  the same step in all 8 such runs. Per head it can be read far lower: a head whose large logits
  sit at a few positions (GPT-2's learned positions) is seen on one step in ``stride``.
"""
from __future__ import annotations

import torch

QUERY_STRIDE = 4
"""Default of the hook-based probes' ``query_stride``: one query position in four (see the module)."""


def query_rows(t: int, stride: int, turn: int) -> slice:
    """The query positions read on forward number ``turn``: ``offset::stride`` of ``t`` positions,
    ``offset = turn % stride`` (never past the last position: at least one row is read)."""
    stride = max(1, min(int(stride), t)) if t > 0 else 1
    return slice(turn % stride, None, stride)


def causal_bias(rows: slice, t: int, s: int, device, dtype) -> torch.Tensor:
    """``(len(rows), s)``: 0 where query ``rows[i]`` of ``t`` may see key ``j`` of ``s`` (the keys end
    at the last query, as in a KV cache: ``j <= i + s - t``), ``-inf`` elsewhere."""
    pos = torch.arange(t, device=device)[rows] + (s - t)
    keep = torch.arange(s, device=device)[None, :] <= pos[:, None]
    return _bias(keep, dtype)


def mask_bias(keep: torch.Tensor, rows: slice, dtype) -> torch.Tensor:
    """``(len(rows), S)`` additive bias from a ``(T, S)`` bool mask (True = attend)."""
    return _bias(keep[rows], dtype)


def _bias(keep: torch.Tensor, dtype) -> torch.Tensor:
    zero = torch.zeros((), device=keep.device, dtype=dtype)
    return torch.where(keep, zero, torch.full((), float("-inf"), device=keep.device, dtype=dtype))


def head_max(q: torch.Tensor, k: torch.Tensor, scale: float, bias: torch.Tensor | None) -> torch.Tensor:
    """Per-head largest ``scale * q.k`` (float32, ``(H,)``) over the entries the bias keeps.

    Args:
        q: ``(B, H, T', d)``, the queries of the rows read.
        k: ``(B, Hkv, S, d)`` with ``H = Hkv * G`` (G = 1 without grouped-query attention); query
            head ``h`` meets key head ``h // G`` (HF's ``repeat_kv`` order).
        scale: the logits' scale, > 0 (so it commutes with the max).
        bias: ``(T', S)`` additive mask (0 / ``-inf``), or None.
    """
    b, h, t, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    g = h // hkv
    # each key head against the queries of its G heads at once: (B*Hkv, G*T', d) @ (B*Hkv, d, S)
    qg = q.reshape(b * hkv, g * t, d)
    kt = k.reshape(b * hkv, s, d).transpose(1, 2)
    if bias is None:
        scores = torch.bmm(qg, kt)
    else:  # the mask added by the matmul itself: no second (B, H, T', S) tensor
        scores = torch.baddbmm(bias.to(qg.dtype).repeat(g, 1), qg, kt)
    return scores.view(b, hkv, g, t, s).amax(dim=(0, 3, 4)).reshape(h).float() * scale
