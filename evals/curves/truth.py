"""The ground truth of a generated run: what happened, when, in one taxonomy.

Kinds are :class:`lossguard.classify.incident.IncidentKind` values (the stable strings in the JSON
document), plus ``regime_change``, which the analyser is gaining; they are kept as strings here so
the generator does not depend on the analyser's enum having every member.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lossguard.classify.incident import IncidentKind


EventKind = IncidentKind
"""Every kind the generator injects: the analyser's public taxonomy (the generator uses its names only;
it was written without reading the detectors)."""


LOSS_SPIKE_KINDS = frozenset({EventKind.SPIKE_FAST, EventKind.SPIKE_SLOW, EventKind.SPIKE_NO_RECOVERY,
                              EventKind.RESUME_SPIKE, EventKind.STREAM_SPIKE})
"""Kinds that are a loss spike; a "don't care" spike absorbs a detection of any of them."""


@dataclass(frozen=True, kw_only=True)
class TruthEvent:
    """One true event of a generated run (all steps are logged steps of the run).

    Attributes:
        kind: what happened.
        onset: first step of the event (for a divergence: the step its rise starts, the turn point).
        peak: step of the largest excursion (onset <= peak).
        end: step where the event is over (back on trend), or the run's last step if never.
        metric: the metric it is visible on (``loss``, ``loss/<stream>``, ``grad_norm``, ``loss_scale``).
        ignore: a "don't care" event (a heavy-tail noise outlier, the grad-norm jump that goes with a
            loss spike): a detection matching it is neither a hit nor a false alarm.
        window: for gradual events, ``(first, last)`` steps a fair detector may name as onset:
            from the turn to the step the rise is 3 noise units high.
    """

    kind: EventKind
    onset: int
    peak: int
    end: int
    metric: str = "loss"
    ignore: bool = False
    window: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if not self.onset <= self.peak <= self.end:
            raise ValueError(f"TruthEvent needs onset <= peak <= end, got {self.onset}, {self.peak}, {self.end}")
        if self.window is not None and self.window[0] > self.window[1]:
            raise ValueError(f"TruthEvent.window must be ordered, got {self.window}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"kind": self.kind.value, "onset": self.onset, "peak": self.peak, "end": self.end,
                "metric": self.metric, "ignore": self.ignore,
                "window": list(self.window) if self.window else None}


@dataclass(kw_only=True)
class CurveRun:
    """A generated run: the rows a logger would have written, and the ground truth.

    Attributes:
        family: the curve family it was drawn from.
        seed: the seed that reproduces it.
        kind: the injected event kind, or None for a clean run.
        steps: step of each row, in write order (steps go back after a resume).
        segment: launch number of each row (0, then 1 after a resume).
        metrics: metric name -> value per row (NaN/inf where the run logged them).
        truth: the true events, ``ignore`` ones included.
        log_every: steps between logged points.
        params: the generator's choices (schedule, noise, shape...), JSON-ready.
    """

    family: str
    seed: int
    kind: EventKind | None
    steps: np.ndarray
    segment: np.ndarray
    metrics: dict[str, np.ndarray]
    truth: list[TruthEvent]
    log_every: int
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def span(self) -> int:
        """Steps from the first logged point to the last."""
        return int(self.steps.max() - self.steps.min())

    @property
    def events(self) -> list[TruthEvent]:
        """The real (not "don't care") events."""
        return [e for e in self.truth if not e.ignore]
