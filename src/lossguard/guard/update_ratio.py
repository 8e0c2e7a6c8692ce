"""The update-to-weight ratio ``||theta_new - theta_old|| / ||theta||`` of one optimizer step, cheaply.

The weights before the step are kept in ONE flat buffer per (device, dtype); each kept tensor is a
view into it. Per step this costs a copy into the views before the step, an in-place subtraction
after it, and one norm per part of the flat buffer. Everything stays on the device; nothing is read.

Where the time goes (CPU, one thread, measured inside real steps of the natural-instability
benchmark's model, ``benchmarks/update_ratio_cost.py``): the cost is memory traffic, not dispatch.
Copying all 168k weights took 0.19 ms before the step and the subtraction plus norm 0.21 ms after it
(1.5% of a 26 ms step) -- six times their cost on the same tensors timed hot in a loop: forward
and backward evict both the weights and the copy from the cache. Fusing did not help: ``torch.cat``
into the buffer before plus ``torch.dist`` against a second buffer after, or one ``torch.dist`` per
tensor (no write-back), were both slower (1.6% and 1.8%, a throwaway script in the same loop).
Only touching fewer bytes helps.

So large tensors are SAMPLED BY ROWS: a contiguous tensor of at least :data:`SAMPLE_MIN_NUMEL`
elements whose first dimension divides by ``sample_every`` (k, default 8) is watched on its rows
0, k, 2k, ... only (whole rows: the skipped rows are never loaded), and its sums of squares count k
times. Smaller or other tensors are kept whole. On the benchmark's model 90% of the weights are
sampled (16.8k kept whole, 18.9k rows of 151k) and the ratio's cost fell from 1.9% to 1.3% of a
step (0.53 -> 0.35 ms), on the ``outside`` shape from 1.8% to 0.7% (0.94 -> 0.34 ms) -- shared 2-core
machine, ``benchmarks/update_ratio_cost.py``. What remains is mostly per-op overhead of the
subtraction's 21 tensors and the few scalar ops (in a cold cache ~10 us each), not bytes. The
estimate's error against the exact ratio on the same steps: median 0.8% / 0.7%, largest 2.7% /
3.2% (mild / outside); a 10x LR step read 9.8x vs 9.4x and 7.3x vs 7.3x its 32-step median. The
ratio's users (the update-size test) look for 5x. What it cannot see: an update confined to the
skipped rows of sampled tensors (one embedding row, say) -- a jump of the whole step, the kind an LR jump
or a bad batch makes, moves every row. ``sample_every=1`` is exact.

Per step after the optimizer: the subtraction, the sampled part scaled by ``sqrt(k)`` in place, ONE
norm of the flat buffer and one multiply by ``1 / ||theta||`` (four ops). It was seven (a norm per part,
stack, square, dot with the parts' weights, sqrt): on this CPU each small op costs ~10 us in a cold
cache, about what a sampled tensor's copy costs (``benchmarks/precursor_overhead.py``, session 8).
"""
from __future__ import annotations

import math

import torch

SAMPLE_MIN_NUMEL = 8192
"""Tensors below this many elements are kept whole: their copy costs little beyond its dispatch."""


class UpdateRatio:
    """Measures ``||dtheta|| / ||theta||`` over ``params`` around each optimizer step.

    Call :meth:`before` right before ``optimizer.step()`` and :meth:`after` right after it.

    Args:
        params: the parameters (any devices and dtypes; one flat buffer per device and dtype).
        sample_every: k; large tensors are watched on every k-th row (see the module docstring).
            1 keeps every weight (exact).
    """

    def __init__(self, params: list[torch.Tensor], sample_every: int = 8) -> None:
        if sample_every < 1:
            raise ValueError(f"sample_every must be >= 1, got {sample_every}")
        self.params = list(params)
        self.sample_every = sample_every
        self._root_k = math.sqrt(sample_every)
        # per group: sources (whole tensors, then row samples), their views into the flat buffer,
        # the flat buffer, its whole part and its sampled part
        self._groups: list[tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor, torch.Tensor,
                                 torch.Tensor]] | None = None
        self._ptrs: list[int] = []
        self._weights = torch.ones(0)
        self._inv: torch.Tensor | None = None  # 1 / ||theta||, taken on refresh

    def _sampled(self, p: torch.Tensor) -> bool:
        k = self.sample_every
        return (k > 1 and p.dim() >= 2 and p.is_contiguous() and p.numel() >= SAMPLE_MIN_NUMEL
                and p.shape[0] % k == 0)

    def _build(self) -> None:
        by_kind: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for p in self.params:
            by_kind.setdefault((p.device, p.dtype), []).append(p)
        self._groups = []
        for (device, dtype), ps in by_kind.items():
            whole = [p.detach() for p in ps if not self._sampled(p)]
            rows = [p.detach().view(p.shape[0], -1)[::self.sample_every] for p in ps if self._sampled(p)]
            src = whole + rows
            n_whole = sum(s.numel() for s in whole)
            flat = torch.empty(sum(s.numel() for s in src), device=device, dtype=dtype)
            views, at = [], 0
            for s in src:
                views.append(flat[at:at + s.numel()].view(s.shape))
                at += s.numel()
            self._groups.append((src, views, flat, flat[:n_whole], flat[n_whole:]))
        self._ptrs = [p.data_ptr() for p in self.params]
        # each part's weight in the sums of squares: 1 whole, ``sample_every`` sampled; filled on the
        # device (no ``torch.tensor(list, device=...)``: a host-to-device copy of pageable memory
        # waits for the device, which a rebuild in the middle of a CUDA run must not)
        w = [float(k) for _, _, _, whole, rows in self._groups for k, p in ((1, whole), (self.sample_every, rows))
             if p.numel()]
        self._weights = torch.ones(len(w), dtype=torch.float32, device=self._groups[0][2].device)
        for i, k in enumerate(w):
            if k != 1.0:
                self._weights[i].fill_(k)

    @torch.no_grad()
    def before(self, refresh: bool) -> None:
        """Keep the weights before the step.

        Args:
            refresh: also (re)take ``||theta||^2`` from the copy (one more norm of the flat buffer).
                Between refreshes the last one is used: one update changes the weights' norm by
                about the ratio itself (~1e-3 at a sane LR), and the ratio's users look for 5x.
        """
        if self._groups is None or refresh and self._ptrs != [p.data_ptr() for p in self.params]:
            self._build()  # first use, or a parameter's storage was replaced (``p.data = ...``)
        assert self._groups is not None
        for src, views, _, _, _ in self._groups:
            torch._foreach_copy_(views, src)
        if refresh or self._inv is None:
            w = self._weights
            self._inv = torch.dot(self._part_norms().square(), w).clamp_min(1e-30).rsqrt()

    @torch.no_grad()
    def after(self, out: torch.Tensor | None = None) -> torch.Tensor | None:
        """The step's ratio (a 0-d float32 device tensor), or None before the first :meth:`before`.

        Args:
            out: a 0-d float32 tensor on the first group's device to write the ratio into (a slot
                of the caller's packed buffer: no stack later); returned.
        """
        if self._groups is None or self._inv is None:
            return None
        norms = []  # one per group (one group: every parameter on one device in one dtype)
        for src, views, flat, _, rows in self._groups:
            torch._foreach_sub_(views, src)  # the copy becomes theta_old - theta_new
            if rows.numel():
                # sum of squares of the sampled rows counts k times: scale them by sqrt(k) in place
                # (the copy is rewritten before the next step), so that ONE norm of the flat buffer
                # is the weighted norm -- fewer small ops, which count here
                rows.mul_(self._root_k)
            wide = flat.dtype == torch.float64  # vector_norm does not narrow: norm it in float64
            n = torch.linalg.vector_norm(flat, dtype=None if wide else torch.float32)
            norms.append(n.float() if wide else n)
        dev = self._inv.device
        total = norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack([n.to(dev) for n in norms]))
        return torch.mul(total, self._inv) if out is None else torch.mul(total, self._inv, out=out)

    def _part_norms(self) -> torch.Tensor:
        """The norms of the kept parts (whole, then sampled, per group), float32, on the first group's device."""
        assert self._groups is not None
        norms: list[torch.Tensor] = []
        for _, _, _, whole, rows in self._groups:
            parts = [p if p.dtype == torch.float32 else p.float() for p in (whole, rows) if p.numel()]
            norms += torch._foreach_norm(parts)
        return torch.stack([n.to(norms[0].device) for n in norms])

