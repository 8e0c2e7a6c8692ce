"""What an update jump (an LR fault seen in the update size) does to the run: one rule for the guard
and ``lossguard simulate``.

:class:`lossguard.guard.update_size.UpdateSizeTest` finds the jump; this module decides the answer:

1. **roll back** to the newest checkpoint at or before the jump's first step (``rollback_distance``
   0: the weights there have not seen a jumped update), so the damaged steps are undone -- the
   evidence can arrive a step or more after the damage (a deferred read on CUDA, or ``confirm``
   steps at an unchanged LR); no data is skipped (an LR fault is not the data's);
2. **cut the LR** from that first step on, for the rest of the run, by the measured jump (the update
   size, or the LR the optimizer used, back to its history), compounding with an earlier cut of
   this cause; booked in the :class:`RunLedger` (never rolled back), so the replayed steps run at
   the corrected LR.

Without a checkpoint to go back to (no store, a framework that owns the loader, the run's rollback
budget spent) the answer is the cut alone, from the next step (:func:`cut_instead`).

Measured (issue 20, ``benchmarks/zoo.py --update-size``): with the cut alone the guard cut the LR
2-4 steps after the jump and 47/90 LR-jump runs ended within 2% of clean -- the loss tests saw the
damage of the jumped steps first, rolled back three times (each replay met the same jump), and
their recurrence cut (x0.1) stayed on top of the update-size cut (``benchmarks/RESULTS.md``).
"""
from __future__ import annotations

from typing import Any, Iterable

from .action import Action
from .checkpoint_choice import choose_checkpoint
from .decision import Decision
from .ledger import RunLedger

CAUSE = "update_jump"
"""The ledger's LR-cut cause, and the rollback's ``cause``, of an update jump."""


def jump_decision(*, step: int, onset: int, cut: float, evidence: str, rollback: bool,
                  numbers: dict[str, Any]) -> Decision:
    """The guard's answer to an update jump found at ``step``: a ROLLBACK to the newest checkpoint
    at or before ``onset`` whose LR cut (x ``cut`` from ``onset`` on) follows when it is carried
    out (:func:`cut_after_rollback`), or -- ``rollback`` False -- the LR cut alone (booked by
    :func:`cut_instead`, which the caller runs)."""
    nums = {**numbers, "cause": CAUSE, "onset": int(onset), "cut": float(cut), "evidence": evidence}
    if rollback:
        nums["rollback_distance"] = 0  # the checkpoint at the onset has not seen a jumped update
        why = (f"{evidence}; roll back to the newest checkpoint at or before step {onset} (the jump's first "
               "step: its updates are undone), no data skipped")
        return Decision(Action.ROLLBACK, int(step), [why], nums)
    return Decision(Action.LR_CUT, int(step), [evidence], nums)


def can_roll_back(decision: Decision, checkpoints: Iterable[int] | None, ledger: RunLedger,
                  max_rollbacks: int) -> bool:
    """Whether an update-jump ROLLBACK can be carried out: a checkpoint at or before its onset
    exists and the run's rollback budget is not spent (an update jump never halts a run)."""
    if checkpoints is None or ledger.rollbacks >= max_rollbacks:
        return False
    return choose_checkpoint(int(decision.numbers["onset"]), checkpoints, 0) is not None


def cut_after_rollback(ledger: RunLedger, decision: Decision, to_step: int) -> Decision:
    """Book the LR cut of a carried-out update-jump rollback (from the jump's first step on, so the
    replayed steps run at the corrected LR) and return its decision."""
    onset, cut = int(decision.numbers["onset"]), float(decision.numbers["cut"])
    factor = ledger.compound_lr_cut(CAUSE, cut, start_step=onset)
    return Decision(Action.LR_CUT, onset, [
        f"the {_what(decision)} at step {onset} undone (rolled back to step {to_step}); LR x{cut:.3g} from step "
        f"{onset} for the rest of the run (the measured jump, undone)"],
        {"factor": round(factor, 12), "cut": cut, "until_step": None, "cause": CAUSE,
         "evidence": decision.numbers.get("evidence", "")})


def _what(decision: Decision) -> str:
    """What the decision answers: an update jump, or (``numbers["trigger"]``, e.g. the precursor
    treatment's ``attention_logits``) the growth another responder found."""
    trigger = decision.numbers.get("trigger")
    return "update jump" if trigger is None else f"{trigger} growth"


def cut_instead(ledger: RunLedger, decision: Decision, why: str | None = None) -> Decision:
    """Book an update jump's LR cut without a rollback (from the step after ``decision.step``) and
    return it as an LR_CUT decision; ``why`` says why there is no rollback (None: none was asked)."""
    cut = float(decision.numbers["cut"])
    factor = ledger.compound_lr_cut(CAUSE, cut, start_step=int(decision.step) + 1)
    nums = {k: v for k, v in decision.numbers.items() if k != "rollback_distance"}
    nums.update(factor=round(factor, 12), until_step=None)
    reasons = [str(nums.get("evidence", ""))] + ([f"no rollback: {why}"] if why else [])
    return Decision(Action.LR_CUT, int(decision.step), reasons, nums)


def resolve_jump(decision: Decision, checkpoints: Iterable[int] | None, ledger: RunLedger, *,
                 max_rollbacks: int, in_process: bool = True) -> Decision:
    """What an update-jump decision comes to, for the guard and ``simulate`` alike: the ROLLBACK
    itself when it can be carried out here (:func:`can_roll_back`, ``in_process``), else its LR cut
    alone, booked (:func:`cut_instead`, with the reason)."""
    if decision.action is not Action.ROLLBACK:
        return cut_instead(ledger, decision)
    if not in_process:
        return cut_instead(ledger, decision, "the framework owns the data loader")
    if can_roll_back(decision, checkpoints, ledger, max_rollbacks):
        return decision
    if checkpoints is None:
        why = "no checkpoint store (pass store= to the guard)"
    elif ledger.rollbacks >= max_rollbacks:
        why = f"the run's rollback budget is spent (max_rollbacks={max_rollbacks})"
    else:
        why = f"no checkpoint at or before step {decision.numbers['onset']}"
    return cut_instead(ledger, decision, why)
