"""The ledger's LR cut applied for one optimizer step, then taken back before the scheduler steps.

The plain loop (:meth:`StabilityGuard.step`) and the framework callbacks
(:mod:`lossguard.integrations._lr_cut`) both use this pair, so a cut means the same everywhere.
"""
from __future__ import annotations

from typing import Any


def scale_lr(optimizer: Any, factor: float) -> list[float]:
    """Multiply every param group's LR by ``factor`` for one optimizer step (the ledger's LR cut on
    top of what the scheduler set for this step). Call :func:`restore_lr` right after the step: the
    scheduler -- chainable ones like ``ExponentialLR`` compute from the current value -- then steps
    from the unscaled LR, so a cut never compounds across steps.

    Args:
        optimizer: a ``torch.optim`` optimizer (or a wrapper exposing ``param_groups``).
        factor: the multiplier (``policy.lr_factor(step)``); 1.0 leaves the groups untouched.

    Returns:
        The groups' LRs before scaling, to pass to :func:`restore_lr`.
    """
    groups = optimizer.param_groups
    saved = [g["lr"] for g in groups]
    if factor != 1.0:
        for g in groups:
            g["lr"] = g["lr"] * factor
    return saved


def restore_lr(optimizer: Any, saved: list[float]) -> None:
    """Put back the LRs :func:`scale_lr` returned (call right after the optimizer step)."""
    for g, lr in zip(optimizer.param_groups, saved, strict=False):
        g["lr"] = lr
