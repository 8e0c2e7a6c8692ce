"""Episode: bad steps close together, the unit the recovery ladder escalates on.

One definition for the guard (built online from verdicts) and the analyser's plans (built from an
incident's onset and end). An episode opens at its first bad step (the *onset*), grows with every
bad step at most ``episode_gap`` steps after the previous one, and is over once the run stays calm
for longer than that. Its budget is per episode: ``rollback_after`` bad steps in one episode ask for
a rollback, whose skipped data is :meth:`Episode.skip_range`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .skip_range import SkipRange
from .verdict import Evidence

_LOSS_EVIDENCE = (Evidence.NON_FINITE, Evidence.LOSS, Evidence.LOSS_SHIFT)


@dataclass(kw_only=True)
class Episode:
    """One episode of bad steps (mutable while it is open)."""

    onset_step: int
    """First bad step."""
    onset_batch: int
    """Data-stream index of the onset's batch (for a recorded log: the step, unless the log says)."""
    last_step: int
    """Latest bad step so far."""
    last_batch: int
    """Data-stream index of the latest bad step's batch (the *last bad batch*)."""
    count: int = 1
    """Bad steps in the episode so far (the per-episode budget is counted against this)."""
    loss_symptom: bool = False
    """A bad step of the episode had a loss symptom (a loss outlier, a loss shift, a non-finite loss
    or gradient): more than the grad norm alone."""
    outside_ramp: bool = False
    """A bad step of the episode came outside the LR ramp (``Verdict.in_lr_ramp`` False)."""
    finite_seen: bool = False
    """A bad step of the episode had a finite loss and gradient norm (else: numerics only)."""

    @classmethod
    def open(cls, step: int, batch_index: int, *, lag: int = 0) -> "Episode":
        """A new episode at ``step``, whose onset is ``lag`` steps (and batches) earlier: the evidence
        of a sustained test began there (a verdict's ``onset_lag``)."""
        return cls(onset_step=max(0, step - lag), onset_batch=max(0, batch_index - lag), last_step=step,
                   last_batch=batch_index)

    def is_over(self, step: int, episode_gap: int) -> bool:
        """True when ``step`` is more than ``episode_gap`` steps after the last bad step."""
        return step - self.last_step > episode_gap

    def add(self, step: int, batch_index: int) -> None:
        """Record one more bad step."""
        self.last_step, self.last_batch, self.count = step, batch_index, self.count + 1

    def note(self, verdict: Any) -> None:
        """Record what a bad step of the episode showed (the evidence the suspect is derived from)."""
        import math

        finite = math.isfinite(verdict.loss) and math.isfinite(verdict.grad_norm) or (
            math.isfinite(verdict.loss) and verdict.grad_norm != verdict.grad_norm and not verdict.grad_norm_outlier)
        self.finite_seen |= finite
        self.loss_symptom |= (not finite) or bool(verdict.loss_outlier) or verdict.evidence in _LOSS_EVIDENCE
        self.outside_ramp |= not verdict.in_lr_ramp

    def needs_rollback(self, rollback_after: int) -> bool:
        """The per-episode budget of skips is spent: ``count >= rollback_after``."""
        return self.count >= rollback_after

    def skip_range(self, skip_margin: int) -> SkipRange:
        """The data a rollback skips: ``[onset batch, last bad batch + 1 + skip_margin)``."""
        return SkipRange(start=self.onset_batch, stop=self.last_batch + 1 + skip_margin)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Episode":
        """The inverse of :meth:`to_dict`."""
        ep = cls(onset_step=int(d["onset_step"]), onset_batch=int(d["onset_batch"]), last_step=int(d["last_step"]),
                 last_batch=int(d["last_batch"]), count=int(d["count"]))
        # Checkpoints from before the signs were kept: assume the loss showed it (the old ladder).
        ep.loss_symptom = bool(d.get("loss_symptom", True))
        ep.outside_ramp = bool(d.get("outside_ramp", True))
        ep.finite_seen = bool(d.get("finite_seen", True))
        return ep
