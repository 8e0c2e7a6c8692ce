"""Incidents: what happened to a run, in one taxonomy, with the evidence that decided it."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from ..recovery.severity import Severity


class IncidentKind(str, Enum):
    """Every pattern lossguard names. The value is the stable identifier used in JSON and the CLI."""

    SPIKE_FAST = "spike_fast_recovery"
    """Loss jumps and is back on its pre-spike trend within a short budget."""
    SPIKE_SLOW = "spike_slow_recovery"
    """Loss jumps and comes back, but over hundreds of steps."""
    SPIKE_NO_RECOVERY = "spike_no_recovery"
    """Loss jumps, starts back down, then settles higher or turns into divergence."""
    DIVERGENCE = "divergence"
    """The loss trend turns upward and keeps rising, without a spike first."""
    LEVEL_SHIFT = "level_shift"
    """The loss moves to a new, higher level and stays there."""
    SUDDEN_DROP = "sudden_drop"
    """A steep improvement after a long slow stretch (grokking-like)."""
    RESUME_SPIKE = "resume_spike"
    """A small spike right after a resume (segment boundary) that recovers."""
    REPEATED_DATA = "repeated_data"
    """After a resume the loss is lower than the first pass at the same steps: the data restarted."""
    STREAM_SPIKE = "stream_spike"
    """In a data mix, a spike on one loss stream but not the others."""
    NON_FINITE = "non_finite"
    """NaN or Inf loss or grad norm."""
    LOSS_SCALE_COLLAPSE = "loss_scale_collapse"
    """fp16 loss scale falling to its minimum with repeated overflows / skipped iterations."""
    GRAD_NORM_SPIKE = "grad_norm_spike"
    """The gradient norm spikes, whether or not the loss has moved yet."""
    STALL = "stall"
    """The loss stops improving far above where its early progress was heading, for a long stretch,
    typically while the LR is at its peak (attention-logit growth), and resumes (or not) as it decays."""
    UPDATES_STOPPED = "updates_stopped"
    """The run kept logging but applied no update for a long stretch: a grad norm logged as a skip
    sentinel (DeepSpeed's -1), a loss repeating the same float exactly, or the guard skipping every
    step (:mod:`lossguard.detect.updates_stopped`)."""
    REGIME_CHANGE = "regime_change"
    """The loss leaves its level and its noise jumps to a new, lasting level (or it becomes exactly
    zero): the data or the loss changed underneath the run, upward or suspiciously downward."""


@dataclass
class Incident:
    """One thing that happened to the run.

    Attributes:
        kind: the pattern.
        metric: the metric it was found on (``loss``, ``loss/cm4``, ``grad_norm``...).
        onset: first step of the episode.
        peak: step of the largest excursion.
        end: step where the metric was back on its pre-event trend, or None if it never was.
        baseline: the metric's pre-event level (robust; the event itself is not in it).
        peak_value: the metric's value at ``peak``.
        magnitude: ``peak_value - baseline`` in the metric's units.
        magnitude_sigma: the same in units of the local noise.
        recovery_steps: ``end - peak``, or None.
        streams: the loss streams that took part (empty for single-stream runs).
        severity: how bad (:class:`~lossguard.recovery.Severity`).
        evidence: one or two sentences, in words, of what decided the kind.
        details: extra numbers behind the evidence (JSON-ready).
    """

    kind: IncidentKind
    metric: str
    onset: int
    peak: int
    end: int | None
    baseline: float
    peak_value: float
    magnitude: float
    magnitude_sigma: float
    recovery_steps: int | None = None
    streams: list[str] = field(default_factory=list)
    severity: Severity = Severity.WARNING
    evidence: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``kind`` as its string value, non-finite floats as None)."""
        d = asdict(self)
        d["kind"] = self.kind.value
        d["severity"] = Severity(self.severity).value
        for k, v in list(d.items()):
            if isinstance(v, float) and v != v or v in (float("inf"), float("-inf")):
                d[k] = None
        return d
