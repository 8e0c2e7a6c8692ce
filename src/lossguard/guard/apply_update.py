"""The plain loop's update: the optimizer step applied or withheld, then scaler, scheduler, zero_grad.

The gate decides: a device gate hands the verdict's ``apply`` flag to an optimizer that takes
``gate=`` (no sync); a host gate reads the flag (the one sync of that path). Either way the
ledger's LR cut is in force for this one step only, and the precursor monitor sees the update
before and after. Accounting: a skipped step consumes its batch and counts as a step (the step
counter and the LR schedule advance; Adam's ``t``, weights and moments do not change).
"""
from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any

from .judge.twins import Judgement
from .lr_scale import restore_lr, scale_lr

if TYPE_CHECKING:
    from .guard import StabilityGuard


def apply_update(guard: StabilityGuard, j: Judgement) -> tuple[Any, float, float]:
    """Apply (or withhold) this step's update as judged by ``j``; call under ``torch.no_grad()``.

    Returns:
        ``(packed, lr_used, loss_scale)``: the values to copy to the host (the judge's, precursors
        appended), the LR the step ran with (the cut included), the loss scale after the update.
    """
    import torch

    opt, scaler = guard.optimizer, guard.scaler
    saved = scale_lr(opt, guard.policy.lr_factor(guard.step_count))
    groups = opt.param_groups
    lr_used = float(groups[0]["lr"]) if groups else math.nan
    if guard.precursors is not None:
        guard.precursors.before_step()
    if guard.gate == "device":
        apply = j.apply if torch.is_tensor(j.apply) else torch.tensor(bool(j.apply))
        (scaler.step(opt, gate=apply) if scaler is not None else opt.step(gate=apply))
    elif guard.config.shadow or bool(j.apply):  # host gate: the one sync of this path
        (scaler.step(opt) if scaler is not None else opt.step())
    restore_lr(opt, saved)
    packed = j.packed
    if guard.precursors is not None:
        from .precursor_hook import append_precursors
        guard.precursors.after_step()
        packed = append_precursors(guard.precursors, packed)
    scale = math.nan
    if scaler is not None:
        scaler.update()
        scale = float(scaler.get_scale())
    if guard.scheduler is not None:
        with warnings.catch_warnings():  # a skipped first step is deliberate
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)`")
            guard.scheduler.step()
    opt.zero_grad(set_to_none=True)
    return packed, lr_used, scale
