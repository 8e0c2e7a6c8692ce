"""resolve_rollback: where a rollback the policy asked for goes, or why it becomes a halt.

One function for the live guard's executor and for ``lossguard simulate``: both hand it the
policy's ROLLBACK decision and the checkpoint steps they know of, and carry out what it returns --
the same target (:func:`choose_checkpoint`), the same halt and the same words. (The executor then
restores real state; simulate only books it. Neither has rollback or halt rules of its own.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .action import Action
from .checkpoint_choice import choose_checkpoint
from .decision import Decision
from .recipe import RecoveryRecipe

__all__ = ["Resolution", "halt_resume_point", "loss_scale_reset_with", "resolve_rollback"]


@dataclass(frozen=True)
class Resolution:
    """What a ROLLBACK decision comes to.

    Attributes:
        decision: the rollback itself, or a HALT (no checkpoint far enough back, or none can be
            restored) carrying the rollback's reasons plus the reason it cannot happen.
        target: the checkpoint step to restore (None for a halt).
    """

    decision: Decision
    target: int | None

    @property
    def halts(self) -> bool:
        """True when the rollback became a halt."""
        return self.decision.action is Action.HALT


def resolve_rollback(decision: Decision, checkpoints: Iterable[int] | None, recipe: RecoveryRecipe, *,
                     can_restore: bool = True, framework: bool = False) -> Resolution:
    """Resolve the policy's ROLLBACK ``decision`` against the checkpoints that exist.

    Args:
        decision: a ROLLBACK decision (its ``numbers["onset"]`` is the episode's onset).
        checkpoints: the checkpoint steps that exist (None: no store at all).
        recipe: the recovery recipe (its ``rollback_distance``).
        can_restore: False when there is nothing to restore the state into (no TrainState).
        framework: a framework owns the data loader (the rollback would be carried out by a
            restarted process); the halt's reason says so.

    Returns:
        The :class:`Resolution`: the rollback with its target, or the halt it turns into.
    """
    onset = int(decision.numbers.get("onset", decision.step))
    # A whole-log finding (repeated data after a resume) goes back to the resume's own checkpoint.
    distance = int(decision.numbers.get("rollback_distance", recipe.rollback_distance))
    target = None if checkpoints is None or not can_restore else choose_checkpoint(onset, checkpoints, distance)
    if target is not None:
        return Resolution(decision, target)
    why = (f"no checkpoint at least {distance} steps before the episode onset (step {onset})"
           if can_restore and checkpoints is not None else
           "no checkpoint store to roll back to (pass store= to the guard)")
    if framework:
        why = f"a rollback is needed, the framework owns the data loader, and {why}"
    return Resolution(Decision(Action.HALT, decision.step, list(decision.reasons) + [why], dict(decision.numbers)),
                      None)


def halt_resume_point(decision: Decision, checkpoints: Iterable[int] | None, recipe: RecoveryRecipe) -> int | None:
    """The checkpoint a halted run should resume from once its cause is fixed: the newest at least
    ``rollback_distance`` before the halted episode's onset (None: none exists)."""
    if checkpoints is None:
        return None
    return choose_checkpoint(int(decision.numbers.get("onset", decision.step)), checkpoints,
                             int(decision.numbers.get("rollback_distance", recipe.rollback_distance)))


def loss_scale_reset_with(target: int, numbers: dict | None = None) -> Decision:
    """The loss-scale reset that follows a rollback to ``target`` in an fp16 run (the recipe's
    ``reset_loss_scale``): the executor carries it out, ``simulate`` books it, in the same words."""
    return Decision(Action.LOSS_SCALE_RESET, int(target), ["reset with the rollback"], dict(numbers or {}))
