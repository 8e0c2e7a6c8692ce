"""Which checkpoints pruning keeps: the newest few, every k-th, a window back, and the protected ones.

A rollback needs a checkpoint at least ``rollback_distance`` steps before a spike; keep-last-k
alone can prune it away (with frequent saves the k newest all lie after the spike's onset).
``min_keep_steps_back`` keeps, besides everything newer than ``newest - N``, the newest checkpoint
at or before that horizon, so such a target always exists; :meth:`CheckpointStore.protect` keeps a
known target whatever the rules say.
"""
from __future__ import annotations


def retention_problems(keep_last: object, keep_every: object, min_keep_steps_back: object) -> list[str]:
    """What is wrong with the retention arguments (empty when they are fine)."""
    problems = []
    if not isinstance(keep_last, int) or keep_last < 1:
        problems.append(f"keep_last must be an int >= 1, got {keep_last!r}")
    if keep_every is not None and (not isinstance(keep_every, int) or keep_every < 1):
        problems.append(f"keep_every must be None or an int >= 1, got {keep_every!r}")
    if min_keep_steps_back is not None and (not isinstance(min_keep_steps_back, int) or min_keep_steps_back < 0):
        problems.append(f"min_keep_steps_back must be None or an int >= 0, got {min_keep_steps_back!r}")
    return problems


def kept_steps(steps: list[int], *, keep_last: int, keep_every: int | None, min_keep_steps_back: int | None,
               protected: set[int]) -> set[int]:
    """The steps (of ``steps``, the valid checkpoints, oldest first) that pruning keeps."""
    keep = set(steps[-keep_last:]) | (protected & set(steps))
    if keep_every:
        keep |= {s for s in steps if s % keep_every == 0}
    if min_keep_steps_back is not None and steps:
        horizon = steps[-1] - min_keep_steps_back
        keep |= {s for s in steps if s > horizon}
        older = [s for s in steps if s <= horizon]
        if older:
            keep.add(older[-1])
    return keep
