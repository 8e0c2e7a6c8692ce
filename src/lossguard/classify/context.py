"""What every pass of :func:`.assemble.find_incidents` shares: the loss series and its detector
events (:class:`Context`), and the spans of steps that earlier passes have already explained
(:class:`Claims`).

The passes run in a fixed order (boundaries, divergences, spikes, resume spikes, drops, shifts,
regime changes, companions) and each one reads the claims of the passes before it and adds its own.
Nothing else carries state from one pass to the next, so a pass can be read on its own.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..detect.series import DetectorConfig, SeriesEvents
from ..detect.trend import Divergence
from ..runlog import RunLog
from .incident import Incident
from .settings import AnalyzeConfig


def overlap(a0: int, a1: int, b0: int, b1: int) -> bool:
    """True when the closed intervals ``[a0, a1]`` and ``[b0, b1]`` share a point."""
    return a0 <= b1 and b0 <= a1


@dataclass
class Claims:
    """Spans of steps (inclusive) already explained by an incident, by what explains them.

    Attributes:
        events: spans of loss incidents found so far (spikes, shifts, resume spikes, divergences
            dated by a gradual episode): a later test must not report the same stretch again.
        explained: the return of repeated data to fresh data (a step up that is not a spike).
        quiet: stretches whose baseline rise is explained (no divergence there).
        standing: divergences reported (or folded into a spike), in finite-point indices.
        turned: ``id(spike episode)`` -> the divergence it turned into (one incident, the spike's).
        resumed: boundary indices whose resume spike has been reported.
        repeated: boundary indices whose repeated data has been reported.
    """

    events: list[tuple[int, int]] = field(default_factory=list)
    explained: list[tuple[int, int]] = field(default_factory=list)
    quiet: list[tuple[int, int]] = field(default_factory=list)
    standing: list[Divergence] = field(default_factory=list)
    turned: dict[int, Divergence] = field(default_factory=dict)
    resumed: set[int] = field(default_factory=set)
    repeated: set[int] = field(default_factory=set)

    def covers(self, a: int, z: int, *, events: bool = True, explained: bool = True, quiet: bool = True) -> bool:
        """True when ``[a, z]`` overlaps a claimed span of the chosen sorts."""
        spans = (self.events if events else []) + (self.explained if explained else []) + (self.quiet if quiet else [])
        return any(overlap(a, z, s0, s1) for s0, s1 in spans)

    def diverging_at(self, i: int) -> bool:
        """True when finite index ``i`` lies inside a standing divergence (after its trigger)."""
        return any(d.trigger <= i and (d.end is None or i <= d.end) for d in self.standing)


@dataclass
class Context:
    """The analysed loss series and everything the passes need to judge it.

    Attributes:
        log: the stitched run.
        metric: the loss series analysed.
        ev: the per-series detector events of ``metric``.
        interval: typical steps between logged points.
        dcfg: detector settings for that interval.
        cfg: the analysis settings.
        streams: the loss streams of a data mix (empty otherwise).
        boundaries: ``(segment, finite index of its first point, kind)`` per resume / rollback.
        incidents: the incidents found so far (passes append).
        notes: remarks about the run as a whole (passes append).
        claims: spans explained so far.
    """

    log: RunLog
    metric: str
    ev: SeriesEvents
    interval: int
    dcfg: DetectorConfig
    cfg: AnalyzeConfig
    streams: list[str]
    boundaries: list[tuple[int, int, str]]
    incidents: list[Incident] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    claims: Claims = field(default_factory=Claims)

    @property
    def st(self) -> np.ndarray:
        """Steps of the finite points (maps a finite index to its step)."""
        return self.ev.steps

    @property
    def lag(self) -> int:
        """Half the outlier window, in points: how far a trailing median lags the curve."""
        return self.dcfg.outlier.window // 2

    def step(self, i: int) -> int:
        """The step of finite index ``i`` (clipped to the series)."""
        return int(self.ev.steps[min(max(i, 0), len(self.ev.steps) - 1)])

    def boundary_near(self, i: int, width: int) -> int | None:
        """The boundary index within ``width`` points at or before finite index ``i``, if any."""
        for _, b, _ in self.boundaries:
            if i - width < b <= i:
                return b
        return None
