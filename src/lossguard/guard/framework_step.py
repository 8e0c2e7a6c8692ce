"""Framework mode: the guard's step when Lightning, HF Trainer, ... call ``optimizer.step()`` themselves.

The verdict is needed before the framework's optimizer step, so this path reads it at once (one
sync). A bad step's gradients are dropped instead of the step being gated: torch's optimizers skip
every parameter without a gradient, so weights, moments, Adam's ``t`` and weight decay stay exactly
as they were. The framework owns the data loader, so a rollback is left to a restarted process
(the executor halts and books ``resume_from``). The precursor statistics (opt-in) are packed after
the framework's optimizer step and read with the next verdict (:mod:`.framework_precursors`).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .guard import StabilityGuard


def framework_step(guard: StabilityGuard, loss: Any) -> bool:
    """Judge the step in flight (:meth:`StabilityGuard.before_optimizer_step`); True if its update
    may be applied (always True in shadow mode or once halted)."""
    import torch

    if guard.halted:
        return True
    held, guard._held = guard._held, []
    guard.executor.in_process_rollback = False
    step, opt, shadow = guard.step_count, guard.optimizer, guard.config.shadow
    if not shadow and guard.policy.skip_to(step) is not None:
        # A batch in a range the ledger skips (booked by a rollback before a restart): the
        # framework still feeds it, so its update is withheld and the detectors never see it.
        guard.log.event({"step": step, "event": "skip_data", "batch_index": step})
        opt.zero_grad(set_to_none=True)
        guard._advance()
        return False
    with torch.no_grad():
        j = guard.stats.judge_step(loss, clip=False)
        bad = bool(j.bad)  # framework mode needs the verdict now: one sync
    lr = float(opt.param_groups[0]["lr"]) if opt.param_groups else math.nan
    meta: dict[str, Any] = {"step": step, "batch_index": step, "lr": lr,
                            "loss_scale": float(guard.scaler.get_scale()) if guard.scaler is not None else math.nan,
                            "rng": None, "replay": None, "batch": None, "precursors": False}
    if held:
        from .micro_batches import MicroBatches
        meta["batch"] = held[0] if len(held) == 1 else MicroBatches(held)
    guard._advance()
    from .framework_precursors import read_with_verdict
    values, meta["responses"] = read_with_verdict(guard, j.packed)  # the last step's precursors first
    guard._process(values, meta)
    if bad and not shadow:
        opt.zero_grad(set_to_none=True)
    if guard.framework_precursors is not None:  # a withheld step too: its logits, update ratio 0
        guard.framework_precursors.before_step(guard, step, lr)
    return not bad or shadow
