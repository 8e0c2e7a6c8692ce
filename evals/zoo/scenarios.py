"""The faults of the zoo's scenarios, as functions of the run's spec (so every run of a spec agrees).

- bad-data pocket: the 20 batches at data positions ``[0.6 * steps, 0.6 * steps + 20)`` are garbage
  (the family's ``garbage``; drawn from a generator seeded by (seed, position), so the guarded and
  the unguarded run see the same garbage). The pocket belongs to the data: a rollback that skips
  those positions skips the garbage, as with a real corrupt shard.
- LR jump: the scheduled LR times 10, 20 or 30 (by :func:`variant`) from step ``steps // 2`` on, through
  the ``LambdaLR`` itself (a rollback restores the schedule, not a cure).
- early gradient fault: once, at one of steps 0-5 (by :func:`variant`), after ``backward()``: one parameter's
  gradient becomes NaN, or every gradient is multiplied by 1e6.
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from evals.zoo.spec import Optim, RunSpec, Scenario, Schedule

POCKET_AT = 0.6
"""Where the pocket starts, as a fraction of the run."""
POCKET_LEN = 20
"""Garbage batches in the pocket."""
LR_JUMPS = (10.0, 20.0, 30.0)
"""LR multipliers of the LR-jump scenario, chosen by :func:`variant`."""
HUGE = 1e6
"""Gradient multiplier of the early-huge fault."""
WARMUP_FRAC = 0.1
"""Warm-up length as a fraction of the run."""


def variant(spec: RunSpec, n: int) -> int:
    """A deterministic choice in ``range(n)`` that varies with seed, batch size and optimizer, so a grid
    with one seed still spreads the LR-jump factors and the early-fault steps over its runs."""
    return (spec.seed + spec.batch_size.bit_length() + list(Optim).index(spec.optimizer)) % n


def pocket(spec: RunSpec) -> range:
    """Data positions of the garbage batches (empty unless the scenario is the pocket)."""
    if spec.scenario is not Scenario.BAD_POCKET:
        return range(0)
    start = int(POCKET_AT * spec.steps)
    return range(start, start + POCKET_LEN)


def garbage_generator(spec: RunSpec, position: int) -> torch.Generator:
    """The generator of the garbage batch at data position ``position``."""
    return torch.Generator().manual_seed(spec.seed * 1_000_003 + position)


JUMP_OFFSET_ENV = "LOSSGUARD_ZOO_JUMP_OFFSET"
"""Steps added to the LR jump's step (``benchmarks/zoo.py --jump-offset``; an environment variable so
that the worker processes see it). Default 0: the jump at ``steps // 2``, on a checkpoint step."""


def lr_jump(spec: RunSpec) -> tuple[int, float] | None:
    """``(from_step, factor)`` of the LR jump, or None."""
    if spec.scenario is not Scenario.LR_JUMP:
        return None
    import os

    return spec.steps // 2 + int(os.environ.get(JUMP_OFFSET_ENV, "0")), LR_JUMPS[variant(spec, len(LR_JUMPS))]


def lr_lambda(spec: RunSpec) -> Callable[[int], float]:
    """The ``LambdaLR`` factor of step ``s`` (the schedule times the scenario's LR jump)."""
    warm = max(1, int(WARMUP_FRAC * spec.steps))
    jump = lr_jump(spec)

    def factor(s: int) -> float:
        if s < warm:
            f = (s + 1) / warm
        elif spec.schedule is Schedule.WARMUP_COSINE:
            t = min(1.0, (s - warm) / max(1, spec.steps - warm))
            f = 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * t))
        else:
            f = 1.0
        if jump is not None and s >= jump[0]:
            f *= jump[1]
        return f
    return factor


def early_fault_step(spec: RunSpec) -> int | None:
    """The step of the early gradient fault, or None."""
    if spec.scenario not in (Scenario.EARLY_NAN, Scenario.EARLY_HUGE):
        return None
    return variant(spec, 6)


def inject_gradient_fault(spec: RunSpec, params) -> None:
    """Corrupt the gradients in place as the scenario says (call once, at :func:`early_fault_step`)."""
    grads = [p.grad for p in params if p.grad is not None]
    with torch.no_grad():
        if spec.scenario is Scenario.EARLY_NAN:
            grads[len(grads) // 2].fill_(math.nan)
        elif spec.scenario is Scenario.EARLY_HUGE:
            for g in grads:
                g.mul_(HUGE)
