"""Verdict: the judge's typed finding about one step (what the policy decides from).

The guard's judge (:mod:`lossguard.guard.judge`) produces one per step; ``lossguard simulate``
produces the same from a recorded log. On a GPU the numbers travel to the host as one small tensor
whose layout is :data:`PACKED_FIELDS` -- named here, once, and turned back into a Verdict by name
(:meth:`Verdict.from_packed`), never by position in the code that reads it.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

PACKED_FIELDS = ("loss", "grad_norm", "loss_z", "grad_norm_z", "loss_baseline", "loss_outlier",
                 "grad_norm_outlier", "overflow", "bad", "local_loss")
"""Order of the floats the device-side judge packs into its one host transfer per step."""

_BOOLS = frozenset({"loss_outlier", "grad_norm_outlier", "overflow", "bad"})


@dataclass(kw_only=True)
class Verdict:
    """The judge's finding about one step.

    Attributes:
        step: optimizer step the verdict belongs to.
        batch_index: data-stream index of the batch that fed it.
        loss: global loss; grad_norm: global gradient norm before clipping (NaN if not watched).
        loss_z / grad_norm_z: distance from the robust baseline in noise units (NaN in warm-up).
        loss_baseline: the loss baseline (median of the trailing window).
        loss_outlier / grad_norm_outlier: the tests' findings (non-finite counts as outlier).
        overflow: non-finite gradients while a GradScaler is in charge (the scaler skips those).
        bad: the update is to be withheld (in shadow mode: would have been).
        loss_scale: the GradScaler's scale after this step (NaN without a scaler).
        lr: the LR the step used (first param group).
        local_loss: this rank's loss (the replay check compares it); equals ``loss`` on one rank.
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
    loss_scale: float = math.nan
    lr: float = math.nan
    local_loss: float = math.nan

    @classmethod
    def from_packed(cls, values: Sequence[float], *, step: int, batch_index: int,
                    loss_scale: float = math.nan, lr: float = math.nan) -> "Verdict":
        """Build from the judge's packed floats (layout :data:`PACKED_FIELDS`)."""
        named = dict(zip(PACKED_FIELDS, (float(v) for v in values)))
        for k in _BOOLS:
            named[k] = bool(named[k])
        return cls(step=step, batch_index=batch_index, loss_scale=loss_scale, lr=lr, **named)

    def reasons(self) -> list[str]:
        """Why the step is bad, as short phrases."""
        out = []
        if not math.isfinite(self.loss):
            out.append("non-finite loss")
        elif self.loss_outlier:
            out.append(f"loss outlier z={self.loss_z:.1f}")
        if self.grad_norm_outlier and not self.overflow:
            if not math.isfinite(self.grad_norm):
                out.append("non-finite gradient")
            else:
                out.append(f"grad-norm outlier z={self.grad_norm_z:.1f}")
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (floats may be NaN; the event log writes them as null)."""
        return asdict(self)
