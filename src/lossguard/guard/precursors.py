"""Precursor statistics of a natural instability, measured on the device with no host sync.

What the loss shows late, these show early (issue 20; Wortsman et al. 2023, "Small-scale proxies for
large-scale Transformer training instabilities"):

* the largest attention logit per layer (:data:`lossguard.metrics.ATTN_LOGIT_MAX`, and per layer
  ``attn_logit_max/<i>``): grows by orders of magnitude at a learning rate that is too high, while
  the loss gap is still small (section 3.1, "attention logit growth");
* the output logits: largest ``|logit|`` and the mean log-partition ``log Z`` (section 3.2, "output
  logit divergence", the drift PaLM's z-loss holds at 0);
* the update-to-weight ratio ``||dtheta|| / ||theta||`` (an LR jump multiplies it 10-30x);
* Adam's second moment against the squared gradient, ``sum(g^2) / sum(v)``: far above 1 when
  a gradient arrives that ``v`` has not seen (the update is then ~ ``g / sqrt(v)`` times too large).

:class:`PrecursorMonitor` writes every scalar into its slot of ONE small device buffer (``out=``: no
stack per step); :meth:`PrecursorMonitor.packed` concatenates it with the per-head logits into ONE
tensor, so a loop (or the guard) reads them in one transfer per step.
"""
from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import nn

from .. import metrics as M
from .attention_probe import AttentionProbe, find_attention
from .logit_recompute import QUERY_STRIDE
from .update_ratio import UpdateRatio


DIAGNOSTIC_EVERY = 4
"""Default of :class:`PrecursorMonitor`'s ``diagnostic_every``."""

LSE_STRIDE = 4
"""The output's log Z is averaged over every ``LSE_STRIDE``-th position (rows of the flattened
``(..., V)`` logits); the largest |logit| is taken over all of them."""


def _find_output(model: nn.Module) -> nn.Module | None:
    """The output projection: a module named ``lm_head`` (HF, nanoGPT) or ``output``, else None."""
    for name, m in model.named_modules():
        if name.rsplit(".", 1)[-1] in ("lm_head", "output") and isinstance(m, nn.Linear):
            return m
    return None


class PrecursorMonitor:
    """Measures the precursor statistics of one model and optimizer.

    Call :meth:`before_step` after ``backward()`` and before ``optimizer.step()``, :meth:`after_step`
    right after it (the guard does both), then :meth:`packed` / :meth:`decode` (or :meth:`read`).

    Args:
        model: the model (a DDP wrapper is unwrapped).
        optimizer: the optimizer; Adam-family ``exp_avg_sq`` state gives the second-moment ratio.
        attention: probe the attention modules (:func:`~lossguard.guard.attention_probe.find_attention`).
        output: the output projection to watch (default: a module named ``lm_head`` / ``output``);
            False: none.
        update_ratio: measure ``||dtheta||/||theta||``. Keeps one flat copy of the parameters
            (large tensors: every 8th row only) to subtract from (:class:`~lossguard.guard.update_ratio.UpdateRatio`).
        every: hook-based attention kinds recompute logits every ``every`` forwards (see
            :class:`~lossguard.guard.attention_probe.AttentionProbe`). Kept at 1: a held value is
            logged as if measured, and the treatment would clip again on it.
        query_stride: hook-based attention kinds (``nn.MultiheadAttention``, HF GPT-2 and Llama)
            recompute the logits of one query position in ``query_stride`` (4; the offset turns
            each forward) against every key: a lower bound measured on every step, at ~1/4 of the
            full recompute (:mod:`~lossguard.guard.logit_recompute`; 1 = exact). The shipped
            attention records every logit for free and ignores it.
        diagnostic_every: the output-logit statistics and Adam's ratio are measured on every
            ``diagnostic_every``-th step (the first included) and held between. They are read as
            trends (a drift of log Z, a second moment that lags the gradient), not as a per-step
            trigger; measured every step they cost ~1.2% more of a CPU step of the benchmark
            model (``benchmarks/precursor_overhead.py``, session 8). The attention logits (QK-clip's trigger) and
            the update ratio (the update-size test counts consecutive steps) stay per step.
    """

    def __init__(self, model: nn.Module, optimizer=None, *, attention: bool = True,
                 output: nn.Module | Literal[False] | None = None, update_ratio: bool = True, every: int = 1,
                 diagnostic_every: int = DIAGNOSTIC_EVERY, query_stride: int = QUERY_STRIDE) -> None:
        base = getattr(model, "module", model)
        self.optimizer = optimizer
        self.params = [p for p in base.parameters() if p.requires_grad]
        self.probes: list[AttentionProbe] = find_attention(base, every=every, query_stride=query_stride) \
            if attention else []
        self.output: nn.Module | None = _find_output(base) if output is None else (output or None)
        device = self.params[0].device if self.params else torch.device("cpu")
        self._ratio = UpdateRatio(self.params) if update_ratio and self.params else None
        self._handle = self.output.register_forward_hook(self._on_output) if self.output is not None else None
        self.update_ratio = update_ratio
        self.diagnostic_every = max(1, int(diagnostic_every))
        self._steps = 0  # optimizer steps seen (after_step calls): picks the diagnostic steps
        self._scalar_names = (([M.OUTPUT_LOGIT_MAX, M.OUTPUT_LSE] if self.output is not None else [])
                              + ([M.UPDATE_RATIO] if update_ratio else [])
                              + ([M.ADAM_V_RATIO] if optimizer is not None else []))
        self.names = ([M.attn_layer(i) for i in range(len(self.probes))]
                      + ([M.ATTN_LOGIT_MAX] if self.probes else []) + self._scalar_names)
        """Metric names :meth:`decode` returns, in order."""
        # every scalar statistic is written (``out=``) into its 0-d view of this buffer, NaN until
        # first measured and held between measurements: packed() then needs no stack of scalars
        self._buf = torch.full((len(self._scalar_names),), math.nan, device=device)
        slot = dict(zip(self._scalar_names, self._buf.unbind(0) if self._scalar_names else (), strict=True))
        unused = torch.empty((), device=device)  # the slot of a statistic not measured: never written
        self._out_max, self._out_lse = slot.get(M.OUTPUT_LOGIT_MAX, unused), slot.get(M.OUTPUT_LSE, unused)
        self._update, self._adam = slot.get(M.UPDATE_RATIO, unused), slot.get(M.ADAM_V_RATIO, unused)

    def _diagnostic_step(self) -> bool:
        return self._steps % self.diagnostic_every == 0

    def _on_output(self, module, args, out) -> None:
        if not module.training or not self._diagnostic_step():
            return
        with torch.no_grad():
            z = out.detach()
            lo, hi = torch.aminmax(z)  # one pass, no |z| tensor
            torch.maximum(-lo, hi, out=self._out_max)
            # log Z on every LSE_STRIDE-th row (an unbiased estimate of the mean): the exp pass over
            # all V logits of every position was ~1.5% of a CPU step of the benchmark model alone.
            rows = z.reshape(-1, z.shape[-1])[::LSE_STRIDE]
            torch.mean(torch.logsumexp(rows.float(), dim=-1), dim=0, out=self._out_lse)

    @torch.no_grad()
    def before_step(self) -> None:
        """After backward, before the optimizer step: Adam's ratio and the parameters' copy."""
        if self.optimizer is not None and self._diagnostic_step():
            # the state's own order (parameters in the order of their first step): no hashing of
            # every parameter to find its state, which cost ~50 us here. getattr: a wrapper's state
            # may hold keys that are no tensors; they have no gradient and are left out.
            pairs = [(g, st["exp_avg_sq"]) for p, st in self.optimizer.state.items()
                     if "exp_avg_sq" in st and (g := getattr(p, "grad", None)) is not None]
            if pairs:
                g2, v = zip(*pairs, strict=True)
                norms = torch.stack(torch._foreach_norm(g2))
                # v >= 0: its sum, per tensor (the L1 norm's foreach was 1.7x slower on CPU)
                den = torch.stack([t.sum(dtype=torch.float32) for t in v]).sum()
                torch.div(torch.dot(norms, norms), den.clamp_min(1e-30), out=self._adam)
        if self._ratio is not None:
            self._ratio.before(refresh=self._diagnostic_step())

    @torch.no_grad()
    def after_step(self) -> None:
        """Right after the optimizer step: ``||theta_new - theta_old|| / ||theta_old||``, the
        denominator taken on the diagnostic steps and held between (see
        :class:`~lossguard.guard.update_ratio.UpdateRatio`)."""
        self._steps += 1
        if self._ratio is not None:
            self._ratio.after(out=self._update)  # written into its slot; nothing before the first before()

    def head_max(self) -> list[torch.Tensor]:
        """Per-head largest attention logit of each probed layer (device tensors)."""
        return [p.head_max() for p in self.probes]

    def packed(self) -> torch.Tensor:
        """Every statistic in one float32 device tensor (no sync): the entries of :attr:`scalar_names`,
        then every probed head's largest logit, layer by layer. The per-layer and overall maxima are
        taken from the heads on the host (:meth:`decode`): fewer device ops per step."""
        heads = [p.head_max() for p in self.probes]
        # a fresh tensor every step (a deferred read may still hold the last one); shipped and hooked
        # probes already give 1-d float32, others are brought to it
        parts = [self._buf] + [h if h.dtype == torch.float32 and h.dim() == 1 else h.reshape(-1).float()
                               for h in heads]
        return torch.cat(parts)

    def packed_length(self) -> int:
        """Number of entries of :meth:`packed`."""
        return len(self._scalar_names) + sum(int(p.head_max().numel()) for p in self.probes)

    def heads(self, values) -> list[list[float]]:
        """Per probed layer, the per-head largest logits from :meth:`packed`'s host values."""
        vals = values.tolist() if hasattr(values, "tolist") else list(values)
        out, i = [], len(self._scalar_names)
        for p in self.probes:
            n = int(p.head_max().numel())
            out.append([float(v) for v in vals[i:i + n]])
            i += n
        return out

    def decode(self, values) -> dict[str, float]:
        """``{metric name: float}`` (every name of :attr:`names`) from :meth:`packed`'s values (a host
        list or tensor)."""
        vals = values.tolist() if hasattr(values, "tolist") else list(values)
        out = {}
        if self.probes:
            layers = [_nan_max(h) for h in self.heads(vals)]
            out = dict(zip(self.names, layers, strict=False))  # names: the layers first, then more
            out[M.ATTN_LOGIT_MAX] = _nan_max(layers)
        k = len(self._scalar_names)
        out.update({n: float(v) for n, v in zip(self._scalar_names, vals[:k], strict=True)})
        return out

    def read(self) -> dict[str, float]:
        """:meth:`packed` read to the host now (one transfer) and decoded."""
        return self.decode(self.packed().cpu())

    def header(self) -> dict[str, Any]:
        """What is measured where (for the log): attention modules, output module."""
        from .attention_probe import describe

        return {"attention": describe(self.probes), "output": self.output is not None,
                "update_ratio": self.update_ratio, "adam": self.optimizer is not None}

    def remove(self) -> None:
        """Detach every hook."""
        for p in self.probes:
            p.remove()
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


def _nan_max(values: list[float]) -> float:
    """The largest value; NaN if any is NaN (as the device's ``amax`` would give)."""
    return math.nan if not values or any(v != v for v in values) else max(values)
