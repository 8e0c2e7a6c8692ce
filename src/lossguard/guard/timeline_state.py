"""The guard's timeline as saved in every checkpoint: detector windows, open episode, data counter,
the opt-in treatments' state (their cut counts only grow on a load: a rollback gives none back).

Rolled back with the checkpoint (unlike the :class:`RunLedger`). Format 2 is the timeline only;
format 1 (from before the ledger, budgets included) is no longer read: such a checkpoint gets a
:class:`~lossguard.errors.CheckpointError` naming its format.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .precursor_hook import load_responders_state, responders_state

if TYPE_CHECKING:
    from .guard import StabilityGuard

GUARD_FORMAT = 2
"""Version of :meth:`StabilityGuard.state_dict` (2: timeline only; the ledger lives apart)."""


def timeline_state(guard: StabilityGuard) -> dict[str, Any]:
    """The guard's timeline, JSON-safe (:meth:`StabilityGuard.state_dict`)."""
    return {"format": GUARD_FORMAT, "judge": guard.judge.state_dict(), "policy": guard.policy.state_dict(),
            "data_count": guard.feed.count, "lr_ramp": guard._lr_ramp.state_dict(),
            "withheld": guard.withheld.state_dict(), "resume_watch": guard._timeline.watch.state_dict(),
            "treatment": responders_state(guard.treatment)}


def load_timeline(guard: StabilityGuard, sd: dict[str, Any]) -> None:
    """Put :func:`timeline_state` output back into ``guard``.

    Raises:
        CheckpointError: ``sd`` is not a guard state of a known format.
    """
    if not isinstance(sd, dict) or sd.get("format") != GUARD_FORMAT:
        from ..errors import CheckpointError
        found = sd.get("format") if isinstance(sd, dict) else type(sd).__name__
        raise CheckpointError(f"not a StabilityGuard state of format {GUARD_FORMAT} (found {found!r})",
                              fix="load a checkpoint saved with this version of the guard")
    guard.judge.load_state_dict(sd["judge"])
    guard.policy.load_state_dict(sd["policy"])
    guard.feed.count = int(sd["data_count"])
    guard._lr_ramp.load_state_dict(sd.get("lr_ramp"))
    guard.withheld.load_state_dict(sd.get("withheld"))
    guard._timeline.watch.load_state_dict(sd.get("resume_watch"))  # a load is a resume: the watch arms
    load_responders_state(guard.treatment, sd.get("treatment"))
