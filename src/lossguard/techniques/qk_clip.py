"""QK-clip: cap a head's largest attention logit by rescaling its query and key weights.

Kimi K2's MuonClip (Moonshot AI 2025, "Kimi K2: Open Agentic Intelligence", section 2.1): after an
optimizer step, for every head whose largest pre-softmax logit ``S_max`` of the step exceeds a
threshold ``tau``, multiply that head's ``W_q`` and ``W_k`` by ``gamma ** 0.5`` each, with
``gamma = tau / S_max``, so the head's logits (bilinear in q and k) shrink by ``gamma`` and the
largest comes back to ``tau``. Heads below ``tau`` are untouched and the architecture is unchanged:
unlike QK-LayerNorm it needs no new parameters and works on a model already trained without it.

The heads and their weights are found by :mod:`lossguard.guard.attention_probe` (lossguard's own
attention, ``torch.nn.MultiheadAttention``, Hugging Face ``GPT2Attention``). Biases of q and k are
scaled with their weights (``q = W x + b``), so the head's q and k scale exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from lossguard.errors import require

require("torch", "torch", "QK-clip")

import torch  # noqa: E402


@dataclass(frozen=True)
class HeadClip:
    """One head rescaled by QK-clip."""

    layer: int
    """Index of the attention module among the probed ones."""
    head: int
    """Head index within the module."""
    max_logit: float
    """The head's largest logit that triggered the clip."""
    factor: float
    """The multiplier applied to the head's W_q and W_k (each): ``sqrt(tau / max_logit)``."""

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"layer": self.layer, "head": self.head, "max_logit": round(self.max_logit, 4),
                "factor": round(self.factor, 6)}


def qk_clip_(probes, head_max: list[list[float]], tau: float) -> list[HeadClip]:
    """Rescale, in place, W_q and W_k of every head whose largest logit exceeds ``tau``.

    Args:
        probes: :class:`~lossguard.guard.attention_probe.AttentionProbe` per attention module.
        head_max: host values, per probe the per-head largest logit of the last step.
        tau: the threshold (Kimi K2: 100 for its 1T model; see ``QKClipConfig.tau``).

    Returns:
        The heads clipped (empty when none passed ``tau``). Non-finite maxima are not clipped
        (scaling by ``sqrt(tau / nan)`` would poison the weights; the guard's NaN test acts there).
    """
    if not tau > 0:
        raise ValueError(f"tau must be > 0, got {tau!r}")
    done = []
    with torch.no_grad():
        for li, (probe, heads) in enumerate(zip(probes, head_max, strict=True)):
            for h, m in enumerate(heads):
                if not (math.isfinite(m) and m > tau):
                    continue
                slices = probe.qk_slices(h)
                if not slices:
                    continue
                f = math.sqrt(tau / m)
                for tensor, dim, idx in slices:
                    tensor.narrow(dim, idx.start, idx.stop - idx.start).mul_(f)
                done.append(HeadClip(li, h, float(m), f))
    return done
