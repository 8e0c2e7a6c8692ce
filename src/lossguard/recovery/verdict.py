"""Verdict: the judge's typed finding about one step (what the policy decides from).

The guard's judge (:mod:`lossguard.guard.judge`) produces one per step; ``lossguard simulate``
produces the same from a recorded log. On a GPU the numbers travel to the host as one small tensor
whose layout is :data:`PACKED_FIELDS` -- named here, once, and turned back into a Verdict by name
(:meth:`Verdict.from_packed`), never by position in the code that reads it.
"""
from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

PACKED_FIELDS = ("loss", "grad_norm", "loss_z", "grad_norm_z", "loss_baseline", "loss_outlier",
                 "grad_norm_outlier", "overflow", "bad", "local_loss", "grad_norm_ratio", "evidence", "onset_lag")
"""Order of the floats the device-side judge packs into its one host transfer per step."""


class Evidence(enum.IntEnum):
    """Which test made a step bad (an int so the device judge can pack it as a float)."""

    NONE = 0
    """The step is fine."""
    NON_FINITE = 1
    """A NaN / Inf loss or gradient norm."""
    LOSS = 2
    """The analyser's loss outlier test."""
    GRAD_AND_LOSS = 3
    """A grad-norm outlier while the loss is elevated too."""
    GRAD_TAIL = 4
    """A grad norm far beyond its own recent tail."""
    COLD_BOUND = 5
    """The sanity bound of the first steps, before the statistics are warm."""
    LOSS_SHIFT = 6
    """The loss has sat above its baseline for half of the latest steps (a sustained shift, e.g.
    a pocket of bad data whose single batches are each within the noise)."""

    def describe(self) -> str:
        """The test in words (for reasons and diagnoses)."""
        return _WORDS[self]


_WORDS = {
    Evidence.NONE: "no test fired",
    Evidence.NON_FINITE: "non-finite loss or gradient",
    Evidence.LOSS: "loss outlier test (the analyser's median/MAD test)",
    Evidence.GRAD_AND_LOSS: "grad-norm outlier together with an elevated loss",
    Evidence.GRAD_TAIL: "grad norm far beyond its own recent tail",
    Evidence.COLD_BOUND: "sanity bound of the first steps (statistics not warm yet)",
    Evidence.LOSS_SHIFT: "loss shift test (the loss above its baseline for half of the latest steps)",
}


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
        grad_norm_ratio: the grad norm over its recent tail (:mod:`lossguard.guard.judge.tail`; NaN in warm-up).
        evidence: which test made the step bad (:class:`Evidence`; the judge's rule is
            :mod:`lossguard.guard.judge.evidence`); NONE for a good step.
        onset_lag: how many steps before this one the evidence began (the loss-shift test: its
            window less one); an episode this verdict opens starts there.
        in_lr_ramp: the LR rose at most ``lr_ramp_window`` steps before this step (warm-up, or an
            upward LR change; :mod:`lossguard.recovery.lr_phase`). Host-side, set by the guard or
            ``simulate`` from the LR, not packed by the judge.
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
    grad_norm_ratio: float = math.nan
    evidence: Evidence = Evidence.NONE
    onset_lag: int = 0
    in_lr_ramp: bool = False

    @classmethod
    def from_packed(cls, values: Sequence[float], *, step: int, batch_index: int,
                    loss_scale: float = math.nan, lr: float = math.nan) -> "Verdict":
        """Build from the judge's packed floats (layout :data:`PACKED_FIELDS`)."""
        named: dict[str, Any] = dict(zip(PACKED_FIELDS, (float(v) for v in values), strict=False))
        for k in _BOOLS:
            named[k] = bool(named[k])
        named["evidence"] = Evidence(int(named["evidence"]))
        named["onset_lag"] = int(named["onset_lag"])
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
            elif self.evidence is Evidence.GRAD_TAIL:
                out.append(f"grad norm {self.grad_norm:.4g} is {self.grad_norm_ratio:.1f}x its recent tail "
                           f"(grad-norm tail test)")
            elif self.evidence is Evidence.GRAD_AND_LOSS:
                out.append(f"grad-norm outlier z={self.grad_norm_z:.1f} together with loss z={self.loss_z:.1f} "
                           f"(grad-norm + loss test)")
            else:
                out.append(f"grad-norm outlier z={self.grad_norm_z:.1f}")
        if self.evidence is Evidence.LOSS_SHIFT:
            out.append(f"loss z={self.loss_z:.1f}: the loss has sat above its baseline for half of the last "
                       f"{self.onset_lag + 1} steps (loss shift test)")
        if self.evidence is Evidence.COLD_BOUND:
            out.append(f"loss {self.loss:.4g} / grad norm {self.grad_norm:.4g} beyond the first steps' sanity "
                       f"bound (statistics not warm yet)")
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (floats may be NaN; the event log writes them as null)."""
        return asdict(self)
