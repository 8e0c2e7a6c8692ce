"""Adam without the epsilon trap: AdamW with ``eps = 0`` made safe, and Adam-atan2.

Molybog et al. 2023 ("A Theory on Adam Instability in Large-Scale Machine Learning") trace loss
spikes to layers whose gradient entries fall to the order of Adam's ``eps``: there the update
``m / (sqrt(v) + eps)`` is no longer the normalised step the rest of the model takes, and when the
gradients come back the update distribution changes abruptly. Their remedy is a smaller ``eps``,
in the limit 0. Stock ``torch.optim.AdamW(eps=0)`` then computes ``0 / 0 = NaN`` for every entry
whose gradient has always been exactly zero (an embedding row of a token not yet seen, a masked
parameter) and writes NaN into the parameter, in its single-tensor, foreach and fused paths alike.

* :class:`AdamWEpsFree` is AdamW with ``eps = 0`` whose update is defined as 0 where the second
  moment is 0 (no information, no step); elsewhere it is exactly ``m_hat / sqrt(v_hat)``.
* :class:`AdamAtan2` replaces the division by ``atan2(m_hat, b * sqrt(v_hat))`` (Everett et al.
  2024, "Scaling Exponents Across Parameterizations and Optimizers", section 4): bounded, defined
  at ``0 / 0`` (``atan2(0, 0) = 0``), and invariant to the scale of the gradient, so there is no
  ``eps`` to tune at all. ``atan2(x, 1) ~ x`` for small ``x``, so with ``a = b = 1`` it matches
  Adam wherever ``|m_hat| << sqrt(v_hat)``.
Both decouple weight decay as AdamW does (Loshchilov & Hutter 2019): ``p *= 1 - lr * wd``.
"""
from __future__ import annotations

from lossguard.errors import require

require("torch", "torch", "The eps-free Adam optimizers")

import math  # noqa: E402

import torch  # noqa: E402
from torch.optim import Optimizer  # noqa: E402

from lossguard.errors import raise_all  # noqa: E402


def _check(lr, betas, weight_decay, extra=()) -> None:
    problems = []
    if not (isinstance(lr, (int, float)) and lr >= 0):
        problems.append(f"field 'lr' must be >= 0, got {lr!r}")
    if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
        problems.append(f"field 'betas' must be two numbers in [0, 1), got {betas!r}")
    if weight_decay < 0:
        problems.append(f"field 'weight_decay' must be >= 0, got {weight_decay!r}")
    problems.extend(extra)
    raise_all(problems, fix="pass valid optimizer hyper-parameters")


class _MomentsOptimizer(Optimizer):
    """Shared Adam moment bookkeeping; subclasses define ``_direction(m_hat, v_hat)``."""

    def _direction(self, m_hat: torch.Tensor, v_hat: torch.Tensor, group: dict) -> torch.Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure=None):
        """Perform one optimisation step; ``closure`` re-evaluates the loss (optional)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            b1, b2 = group["betas"]
            lr, wd = group["lr"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if g.is_sparse:
                    raise RuntimeError(f"{type(self).__name__} does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                t = state["step"]
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.lerp_(g, 1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                m_hat = m / (1 - b1 ** t)
                v_hat = v / (1 - b2 ** t)
                if wd:
                    p.mul_(1 - lr * wd)
                p.add_(self._direction(m_hat, v_hat, group), alpha=-lr)
        return loss


class AdamWEpsFree(_MomentsOptimizer):
    """AdamW with ``eps = 0``: update ``m_hat / sqrt(v_hat)``, and 0 where ``v_hat == 0``.

    Args:
        params: parameters or parameter groups.
        lr: learning rate.
        betas: ``(beta1, beta2)``.
        weight_decay: decoupled weight decay.
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999),
                 weight_decay: float = 0.01) -> None:
        _check(lr, betas, weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay))

    def _direction(self, m_hat, v_hat, group):
        denom = v_hat.sqrt()
        # where v_hat == 0 every gradient seen was exactly 0, hence m_hat == 0 too: step 0.
        return torch.where(denom > 0, m_hat / torch.where(denom > 0, denom, 1.0),
                           torch.zeros_like(m_hat))


class AdamAtan2(_MomentsOptimizer):
    """Adam-atan2: update ``a * atan2(m_hat, b * sqrt(v_hat))`` (Everett et al. 2024), no eps.

    Args:
        params: parameters or parameter groups.
        lr: learning rate.
        betas: ``(beta1, beta2)``.
        weight_decay: decoupled weight decay.
        a: output scale of the update (1 matches Adam for small ``m_hat / sqrt(v_hat)``).
        b: scale of the denominator.
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), weight_decay: float = 0.01,
                 a: float = 1.0, b: float = 1.0) -> None:
        extra = [f"field '{n}' must be > 0 and finite, got {x!r}" for n, x in (("a", a), ("b", b))
                 if not (x > 0 and math.isfinite(x))]
        _check(lr, betas, weight_decay, extra)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay,
                                      a=a, b=b))

    def _direction(self, m_hat, v_hat, group):
        return group["a"] * torch.atan2(m_hat, group["b"] * v_hat.sqrt())
