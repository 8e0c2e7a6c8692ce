"""Suspect: what the policy holds responsible for an episode, derived from evidence it has.

One enum for the guard's event records (``"suspect"``), the ledger, the analyser's plans and the
report. The rule that picks one is :meth:`lossguard.recovery.RecoveryPolicy.suspect_for`.
"""
from __future__ import annotations

import enum


class Suspect(str, enum.Enum):
    """The likely cause of an episode; the value is the string written in records."""

    DATA = "data"
    """Bad batches: the first rollback's assumption, until the evidence says otherwise."""
    OPTIMIZER = "optimizer"
    """The weights / optimizer state at this LR: the episode came back at the same place on other
    data (a recurrence), or the loss kept rising on new data."""
    LR_SCHEDULE = "lr_schedule"
    """The LR schedule itself: the episode came while the LR was still ramping up (warm-up) or right
    after the LR changed, with no sign in the loss that the data was bad."""
    NUMERICS = "numerics"
    """Non-finite values or an fp16 loss-scale collapse (numerics, not data)."""
    DATA_POSITION = "data_position"
    """The data loader's position after a resume (repeated data: the level test at a resume)."""

    def __str__(self) -> str:
        return self.value
