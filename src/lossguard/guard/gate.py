"""Withholding a bad update, NaN-safely: a device-gated AdamW, and the helpers around a skip.

Two ways to skip a step, with their costs:

- **device gate** (:class:`SkipStepAdamW`, or any optimizer whose ``step`` takes ``gate=``): the
  verdict stays a 0-d bool tensor. No host sync. Never multiply the update by 0 as OLMo-core does:
  ``0 * NaN = NaN``, so a NaN gradient would reach the weights and both moments. Two ways:

  * on CUDA, torch's fused AdamW kernel takes the gate as its ``found_inf`` input (the input
    ``GradScaler`` uses): a closed gate makes every kernel return before it reads a gradient, and
    Adam's ``t`` is advanced and taken back on the device. One kernel launch per group of tensors
    -- the per-tensor select below cost ~1,600 launches per step on a 12-layer GPT, +25 ms of a
    50 ms step on an H200 (``benchmarks/gpu_overhead.py``). Bitwise ``AdamW(fused=True)``.
  * elsewhere, the update is computed and then *selected* per tensor with ``torch.where(gate, new,
    old)``; Adam's ``t`` advances by the gate (0 or 1). Cost: the temporaries of one AdamW update
    (about five parameter-sized buffers, freed at once) and the select. Bitwise ``torch.optim.AdamW``
    on the CPU, foreach or not (:func:`_gated_update`).
- **host gate** (any ``torch.optim`` optimizer): read the verdict once per step (one scalar
  transfer, a sync on CUDA) and simply do not call ``optimizer.step()``. Exact by construction.
"""
from __future__ import annotations

import torch


class SkipStepAdamW(torch.optim.AdamW):
    """AdamW (Loshchilov & Hutter, decoupled weight decay) whose update can be gated on the device.

    A ``torch.optim.AdamW`` (same state keys: ``step``, ``exp_avg``, ``exp_avg_sq``; ``step`` a
    float32 0-d tensor on the parameter's device, as in torch's fused and capturable modes) whose
    ``step`` also takes ``gate=``. See the module for the two ways it withholds an update.

    Args:
        params: parameters or param groups.
        lr: learning rate.
        betas: coefficients of the running averages of the gradient and its square.
        eps: added to the denominator for numerical stability.
        weight_decay: decoupled weight decay coefficient.
        fused: torch's fused kernel (gated through its ``found_inf``). None: when every parameter is
            a floating CUDA tensor (then it is bitwise ``AdamW(fused=True)``); False: the per-tensor
            select (bitwise ``AdamW`` on the CPU).
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, *, fused: bool | None = None) -> None:
        if not lr >= 0 or not eps >= 0 or not weight_decay >= 0 or not all(0 <= b < 1 for b in betas):
            from ..errors import ConfigError
            raise ConfigError(f"SkipStepAdamW: invalid lr={lr}, betas={betas}, eps={eps}, "
                              f"weight_decay={weight_decay}", fix="lr, eps, weight_decay >= 0; betas in [0, 1)")
        params = [p if torch.is_tensor(p) else dict(p, params=_as_list(p["params"])) for p in _as_list(params)]
        if fused is None:
            tensors = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
            fused = bool(tensors) and all(p.is_cuda and p.is_floating_point() for p in tensors)
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused or None)

    supports_gate = True
    """Marker the guard looks for: ``step(gate=tensor)`` is supported."""

    @torch.no_grad()
    def step(self, closure=None, *, gate: torch.Tensor | None = None):
        """One AdamW update, applied only where ``gate`` is True (a 0-d bool tensor; None = apply).

        With ``gate`` False every parameter, both moments and ``step`` keep their exact bits, even
        when the gradients hold NaN or Inf.
        """
        if self.defaults.get("fused"):
            # torch's fused kernel returns before it reads anything while found_inf is 1, and takes
            # Adam's t back by found_inf: the protocol GradScaler drives, with no host sync
            self.found_inf = None if gate is None else (~gate).to(torch.float32)
            try:
                return super().step(closure)
            finally:
                self.found_inf = None
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                ok = None if gate is None else gate.to(device=p.device)
                _gated_update(p, p.grad, st, ok, lr=lr, b1=b1, b2=b2, eps=eps, wd=wd)
        return loss


def _as_list(params) -> list:
    """``params`` (one tensor, or an iterable, possibly a generator) as a list, consumed once."""
    return [params] if torch.is_tensor(params) else list(params)


def _gated_update(p: torch.Tensor, g: torch.Tensor, st: dict, ok: torch.Tensor | None, *, lr: float,
                  b1: float, b2: float, eps: float, wd: float) -> None:
    """One parameter's AdamW update, op for op as ``torch.optim.AdamW`` computes it, then selected.

    Bitwise equal to torch's AdamW (non-capturable, single-tensor and foreach alike on CPU) on an
    open gate, because it runs the same kernels in the same order with the same scalars: torch
    reads ``t`` to the host and forms the bias corrections in float64 Python arithmetic, which the
    kernels then round to the parameter's dtype. Here ``t`` stays on the device (it advances by the
    gate, so reading it would be a host sync); the corrections are formed from it in float64 0-d
    tensors, which the kernels round the same way a Python float is rounded. The only differences
    from the torch code are out-of-place results (the old values are needed for the select) and
    ``addcdiv_(m, denom, value=-step_size)`` spelled as its kernel's own order,
    ``param + (value * m) / denom``, because ``value`` cannot be a tensor there. That spelling
    rounds each step to the parameter's dtype, as the fused kernel does for float32 (the case
    tested); for bf16/fp16 parameters torch's kernels compute in float32 in between, so those may
    differ in the last bit (not tested).
    """
    m, v, t = st["exp_avg"], st["exp_avg_sq"], st["step"]
    t_new = t + 1 if ok is None else t + ok.to(t.dtype)
    t64 = t_new.to(torch.float32 if t_new.device.type == "mps" else torch.float64)  # MPS has no float64
    bc1 = 1 - torch.pow(b1, t64)
    neg_step_size = bc1.new_full((), -lr).div_(bc1)  # -(lr / bc1); `-lr / bc1` would be reciprocal * -lr
    # torch takes Python's `bc2 ** 0.5` (C pow); sqrt is correctly rounded and pow nearly always is,
    # and both are rounded to float32 next: a difference needs a float64 within 1 ulp of a float32 tie.
    bc2_sqrt = (1 - torch.pow(b2, t64)).sqrt_()
    p_new = p.mul(1 - lr * wd) if wd != 0 else p.clone()
    m_new = torch.lerp(m, g, 1 - b1)
    v_new = v.mul(b2).addcmul_(g, g, value=1 - b2)
    denom = v_new.sqrt().div_(bc2_sqrt).add_(eps)
    p_new.add_(m_new.mul(neg_step_size).div_(denom))
    if ok is None:
        p.copy_(p_new), m.copy_(m_new), v.copy_(v_new)
    else:
        # Select, never multiply: a NaN in the rejected branch cannot leak.
        p.copy_(torch.where(ok, p_new, p))
        m.copy_(torch.where(ok, m_new, m))
        v.copy_(torch.where(ok, v_new, v))
    t.copy_(t_new)


def supports_device_gate(optimizer) -> bool:
    """True if ``optimizer.step`` accepts ``gate=`` (it declares ``supports_gate = True``)."""
    return bool(getattr(optimizer, "supports_gate", False))


def optimizer_state_finite(optimizer) -> bool:
    """True if every floating tensor in the optimizer state is finite (one sync; used off the hot path).

    A NaN-poisoned moment is why a loss-scale reset alone often fails to rescue an fp16 run.
    """
    flags = [torch.isfinite(v).all() for st in optimizer.state.values() for v in st.values()
             if torch.is_tensor(v) and v.is_floating_point()]
    return bool(torch.stack([f.cpu() for f in flags]).all()) if flags else True


def grad_norm(parameters, max_norm: float | None = None) -> torch.Tensor:
    """Global L2 norm of the gradients (before clipping), clipping to ``max_norm`` if given; no sync.

    Returns a float32 0-d tensor on the gradients' device (0 when no parameter has a gradient).
    """
    params = [p for p in parameters if p.grad is not None]
    if not params:
        return torch.zeros(())
    total = torch.nn.utils.get_total_norm([p.grad for p in params], norm_type=2.0,
                                          error_if_nonfinite=False, foreach=True)
    if max_norm is not None:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total, foreach=True)
    return total
