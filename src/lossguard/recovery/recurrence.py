"""Recurrence: an episode that comes back where the previous rollback was, on different data.

A first rollback assumes bad data and skips it. If the next episode needing a rollback starts at
"the same place" -- within ``recurrence_window`` steps of the previous onset, or in the first
batches after the skipped ones -- the data was not the cause, and the policy's suspect moves
towards the optimizer (:meth:`RecoveryPolicy.suspect`). Where a framework cannot jump its loader
(HF, Lightning) the skipped batches are withheld updates, so an instability of the weights comes
back once updates resume, the length of the skip later (issue 10: HF runs with an LR fault rolled
back 6 times, each a "new" incident 23 steps after the last, and never got the decisive LR cut).
"""
from __future__ import annotations

from typing import Any

from .config import PolicyConfig
from .episode import Episode


def recurrence_of(config: PolicyConfig, previous: dict[str, Any] | None, ep: Episode) -> dict[str, Any] | None:
    """The previous rollback (``ledger.last_rollback``) if ``ep`` is its recurrence, else None."""
    cfg, prev = config, previous
    if prev is None or prev.get("skip_batches") is None:
        return None
    window = cfg.episode_gap if cfg.recurrence_window is None else cfg.recurrence_window
    a, b = prev["skip_batches"]
    if a <= ep.onset_batch < b:
        return None  # the same data again (not skipped after all): no evidence either way
    same_step = abs(ep.onset_step - prev["onset"]) <= window
    right_after_skip = 0 <= ep.onset_batch - b <= window
    return prev if same_step or right_after_skip else None


def recurrence_reason(config: PolicyConfig, previous: dict[str, Any], ep: Episode, n: int, suspect: str) -> str:
    """The reason a rollback for the ``n``-th recurrence gives: where the episode came back, and
    what that says about the cause (``suspect``: ``"optimizer"`` or ``"data"``)."""
    verdict = ("for an optimizer instability (LR too high for the weights there)" if suspect == "optimizer"
               else f"not yet enough (recurrences_to_cut={config.recurrences_to_cut}): skipping data again")
    return (f"recurrence {n}: onset {ep.onset_step} is {abs(ep.onset_step - previous['onset'])} steps from the "
            f"onset {previous['onset']} of the previous rollback, which skipped batches {previous['skip_batches']}; "
            f"the spike came back on different data (batch {ep.onset_batch}): evidence against bad data, " + verdict)
