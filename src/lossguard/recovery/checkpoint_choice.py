"""choose_checkpoint: the one rule for where a rollback goes, used by the guard and the plan.

Rule: **the newest checkpoint at step <= max(onset - rollback_distance, 0)**; None when there is
none (the guard then halts, the plan says to restart from scratch). The clamp at 0 lets an episode
in the first ``rollback_distance`` steps go back to a step-0 checkpoint (the guard saves one before
the first step). A checkpoint closer to the onset than ``rollback_distance`` is never chosen: the
damage may already be baked into it.
"""
from __future__ import annotations

from typing import Iterable


def rollback_limit(onset: int, rollback_distance: int) -> int:
    """The latest step a rollback for an episode starting at ``onset`` may go back to."""
    return max(int(onset) - int(rollback_distance), 0)


def choose_checkpoint(onset: int, checkpoints: Iterable[int], rollback_distance: int) -> int | None:
    """The rollback target for an episode (see the module docstring for the rule).

    Args:
        onset: the episode's first bad step.
        checkpoints: steps of the checkpoints that exist (any order).
        rollback_distance: :attr:`RecoveryRecipe.rollback_distance`.

    Returns:
        The checkpoint step, or None when no checkpoint qualifies.
    """
    limit = rollback_limit(onset, rollback_distance)
    ok = [int(c) for c in checkpoints if int(c) <= limit]
    return max(ok) if ok else None
