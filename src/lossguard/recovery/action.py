"""Action: what lossguard does (guard) or advises (analyser plan) about a step or an incident.

One enum for both sides. The value is the ``"event"`` string of the guard's JSONL log and the
``"action"`` string of an analysis plan, so a report and a guard log speak the same words.
"""
from __future__ import annotations

import enum


class Action(str, enum.Enum):
    """Actions of the recovery ladder, plus the two "nothing to do" outcomes of a plan."""

    NONE = "none"
    """Plan only: nothing to do (e.g. a sudden improvement)."""
    WATCH = "watch"
    """Plan only: no action now; watch whether it recurs."""
    APPLY = "apply"
    """Guard only: the step was fine and its update applied (never logged as an event)."""
    SKIP = "skip"
    """The update was withheld: weights and optimizer state unchanged."""
    ROLLBACK = "rollback"
    """Restore a checkpoint before the episode and skip the episode's batches plus a margin."""
    LR_CUT = "lr_cut"
    """Lower the LR for a while (follows a rollback)."""
    LOSS_SCALE_RESET = "loss_scale_reset"
    """Reset the fp16 GradScaler (scale and growth tracker)."""
    HALT = "halt"
    """Stop the run with a diagnosis and the checkpoint to resume from."""
    REPLAY = "replay"
    """Guard only: a flagged step's forward was re-run to check whether the fault reproduces."""

    def __str__(self) -> str:
        return self.value

    @property
    def changes_future(self) -> bool:
        """True for actions after which the run no longer follows the recorded timeline."""
        return self in (Action.ROLLBACK, Action.LR_CUT, Action.LOSS_SCALE_RESET, Action.HALT)
