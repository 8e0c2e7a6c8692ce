"""What the guard decided about one step: an :class:`Action` plus the numbers that decided it."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Action(str, enum.Enum):
    """The guard's actions; the value is the ``"event"`` string written to the JSONL log."""

    APPLY = "apply"
    """The step was fine and its update applied (never logged as an event)."""
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
    """A flagged step's forward was re-run to check whether the fault reproduces."""


@dataclass
class StepRecord:
    """The host's copy of one step's device-side statistics (one small transfer).

    Attributes:
        step: optimizer step the record belongs to.
        batch_index: data-stream index of the batch that fed it.
        loss: global loss; grad_norm: global gradient norm before clipping (NaN if not watched).
        loss_z / grad_norm_z: distance from the robust baseline in noise units (NaN in warm-up).
        loss_baseline: the loss baseline (median of the trailing window).
        loss_outlier / grad_norm_outlier: the detectors' verdicts (non-finite counts as outlier).
        overflow: non-finite gradients while a GradScaler is in charge (the scaler skips those).
        bad: the guard withheld (or, in shadow mode, would have withheld) the update.
        loss_scale: the GradScaler's scale after this step (NaN without a scaler).
        lr: the LR the step used (first param group).
    """

    step: int
    batch_index: int
    loss: float
    grad_norm: float
    loss_z: float
    grad_norm_z: float
    loss_baseline: float
    loss_outlier: bool
    grad_norm_outlier: bool
    overflow: bool
    bad: bool
    loss_scale: float = float("nan")
    lr: float = float("nan")

    def reasons(self) -> list[str]:
        """Why the step is bad, as short phrases."""
        out = []
        if self.loss != self.loss or abs(self.loss) == float("inf"):
            out.append("non-finite loss")
        elif self.loss_outlier:
            out.append(f"loss outlier z={self.loss_z:.1f}")
        if self.grad_norm_outlier and not self.overflow:
            if self.grad_norm != self.grad_norm or abs(self.grad_norm) == float("inf"):
                out.append("non-finite gradient")
            else:
                out.append(f"grad-norm outlier z={self.grad_norm_z:.1f}")
        return out


@dataclass
class Decision:
    """One decision of the policy.

    Attributes:
        action: what to do.
        step: the step it was decided at.
        reasons: why, in words.
        numbers: the figures behind it (JSON-ready), written into the event record.
    """

    action: Action
    step: int
    reasons: list[str] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The JSONL event record: ``{"step", "event", "reasons", ...numbers}``."""
        rec: dict[str, Any] = {"step": self.step, "event": self.action.value}
        if self.reasons:
            rec["reasons"] = list(self.reasons)
        rec.update(self.numbers)
        return rec
