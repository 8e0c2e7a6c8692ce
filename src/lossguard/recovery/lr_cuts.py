"""The LR cut a carried-out rollback brings: one rule per cause, the first that applies wins.

- ``loss_rising`` (the rise rule rolled back): x ``recurrence_lr_factor`` from just before the loss's
  lowest point (``loss_rise_lead`` steps), for the rest of the run, compounding with an earlier one;
- a recurrence whose suspect is the optimizer: x ``recurrence_lr_factor`` from the rollback target,
  for ``recurrence_lr_steps`` (None: the rest of the run), compounding;
- ``update_jump`` (an LR fault seen in the update size, :mod:`.update_jump`): x the measured jump
  from the jump's first step, for the rest of the run, compounding;
- otherwise, from the ``lr_cut_from``-th rollback: the recipe's mild cut (x ``recipe.lr_cut_factor``
  for ``lr_cut_steps``).

Each cut is booked in the :class:`RunLedger` (never rolled back) and returned as a decision.
"""
from __future__ import annotations

from .action import Action
from .config import PolicyConfig
from .decision import Decision
from .ledger import LrCut, RunLedger
from .update_jump import CAUSE as UPDATE_JUMP
from .update_jump import cut_after_rollback


def lr_cut_after_rollback(config: PolicyConfig, ledger: RunLedger, decision: Decision, to_step: int) -> Decision | None:
    """Book the LR cut the rollback ``decision`` (carried out to ``to_step``) brings; returns its
    decision, or None when it brings none."""
    cfg, led = config, ledger
    if decision.numbers.get("cause") == UPDATE_JUMP:
        return cut_after_rollback(led, decision, to_step)
    if decision.numbers.get("cause") == "loss_rising":
        # From (just before) the lowest point on, where the loss stopped coming down -- not from
        # the rollback target: the steps replayed up to there were healthy at the scheduled LR.
        start = max(int(to_step), int(decision.numbers["onset"]) - cfg.loss_rise_lead)
        factor = led.compound_lr_cut("loss_rising", cfg.recurrence_lr_factor, start_step=start)
        return Decision(Action.LR_CUT, to_step, [
            f"the loss did not come back (rising on new data since step {decision.numbers['onset']}): optimizer "
            f"instability suspected; LR x{cfg.recurrence_lr_factor:g} (recurrence_lr_factor) from step {start} "
            f"for the rest of the run"],
            {"factor": round(factor, 12), "cut": cfg.recurrence_lr_factor, "until_step": None,
             "cause": "loss_rising"})
    if decision.numbers.get("suspect") == "optimizer" and cfg.recurrence_lr_factor < 1:
        led.recurrences += 1
        until = None if cfg.recurrence_lr_steps is None else to_step + cfg.recurrence_lr_steps
        factor = led.compound_lr_cut("recurrence", cfg.recurrence_lr_factor, start_step=to_step, until_step=until)
        held = "for the rest of the run" if until is None else f"until step {until}"
        return Decision(Action.LR_CUT, to_step, [
            f"episode recurred at step {decision.numbers['onset']} after the rollback for the episode at "
            f"step {decision.numbers.get('recurrence_of')} skipped its data: optimizer instability "
            f"suspected; LR x{cfg.recurrence_lr_factor:g} (recurrence_lr_factor), {held}"],
            {"factor": round(factor, 12), "cut": cfg.recurrence_lr_factor, "until_step": until,
             "cause": "recurrence", "recurrences": led.recurrences})
    cut = cfg.recipe.lr_cut_factor
    if cfg.lr_cut_from and led.rollbacks >= cfg.lr_cut_from and cut < 1:
        until = to_step + cfg.lr_cut_steps
        led.set_lr_cut(LrCut(start_step=to_step, until_step=until, factor=cut, cause="rollbacks"))
        return Decision(Action.LR_CUT, to_step, [f"rollback number {led.rollbacks} (lr_cut_from={cfg.lr_cut_from})"],
                        {"factor": cut, "until_step": until, "cause": "rollbacks"})
    return None
