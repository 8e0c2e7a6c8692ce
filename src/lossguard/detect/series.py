"""All single-metric detectors run together over one series: the unit the analyser and guard share.

:func:`detect_series` is the whole-log path (vectorised); :class:`OnlineSeriesDetector` feeds the
same detectors one point at a time, as the guard does. Both return a :class:`SeriesEvents` whose
indices are *finite-point* indices plus ``steps`` to map them back, and tests prove the two paths
give identical events. Per metric the detectors are: up-episodes (spikes), gated down-episodes
(drops and dips), divergence of the baseline, and runs of non-finite values.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import copy
import math

import numpy as np

from ..errors import raise_all
from .drop import DropConfig, OnlineDropGate, smoothed_down, steep_gate_at
from .episode import Excursion, EpisodeConfig, OnlineEpisodes, find_episodes
from .nonfinite import NonFiniteRun, OnlineNonFinite, find_nonfinite
from .outlier import OnlineOutlier, OutlierConfig, score_finite
from .trend import Divergence, OnlineTrend, TrendConfig, find_divergences


@dataclass(kw_only=True)
class DetectorConfig:
    """Settings of every per-series detector (defaults are scale-free)."""

    outlier: OutlierConfig = field(default_factory=OutlierConfig)
    """Robust outlier test; its ``side`` is ignored (up and down are both evaluated)."""
    spike: EpisodeConfig = field(default_factory=EpisodeConfig)
    """Grouping of upward outliers into spike episodes."""
    dip: EpisodeConfig = field(default_factory=lambda: EpisodeConfig(side="down", refractory=128))
    """Grouping of steep, smoothed downward outliers (:mod:`.drop`) into drop / dip episodes."""
    drop: DropConfig = field(default_factory=DropConfig)
    """Steepness gate and persistence of sudden drops."""
    trend: TrendConfig = field(default_factory=TrendConfig)
    """Divergence of the baseline."""

    def __post_init__(self) -> None:
        problems = []
        if self.spike.side != "up":
            problems.append(f"spike.side must be 'up', got {self.spike.side!r}")
        if self.dip.side != "down":
            problems.append(f"dip.side must be 'down', got {self.dip.side!r}")
        raise_all(problems)


@dataclass
class SeriesEvents:
    """What the detectors found on one series.

    Attributes:
        steps: steps of the finite points (maps every finite index below to its step).
        values: the finite values.
        baseline, noise: trailing robust baseline / sigma per finite point (NaN before a verdict).
        spikes: upward episodes.
        dips: gated downward episodes (drops, and dips that came back).
        divergences: sustained climbs of the baseline.
        nonfinite: runs of NaN/Inf, in indices of ``all_steps``.
        all_steps: steps of every point including non-finite ones.
    """

    steps: np.ndarray
    values: np.ndarray
    baseline: np.ndarray
    noise: np.ndarray
    spikes: list[Excursion]
    dips: list[Excursion]
    divergences: list[Divergence]
    nonfinite: list[NonFiniteRun]
    all_steps: np.ndarray


def detect_series(steps: np.ndarray, values: np.ndarray, cfg: DetectorConfig | None = None, *,
                  dips: bool = True, trend: bool = True) -> SeriesEvents:
    """Run every per-series detector over a whole series (steps ascending).

    ``dips=False`` / ``trend=False`` skip the drop and divergence detectors (the grad norm needs
    neither); the online twin then simply ignores their results.
    """
    cfg = cfg or DetectorConfig()
    values = np.asarray(values, dtype=np.float64)
    steps = np.asarray(steps, dtype=np.int64)
    finite = np.isfinite(values)
    allf = bool(finite.all())
    x, fsteps = (values, steps) if allf else (values[finite], steps[finite])
    sc = score_finite(x, cfg.outlier)
    base, noise = sc.baseline, sc.noise
    spikes = find_episodes(x, sc.up, base, noise, cfg.spike)
    found_dips: list[Excursion] = []
    if dips:
        warm = np.arange(len(x)) < cfg.outlier.window
        cand, _ = smoothed_down(x, base, noise, warm, cfg.outlier, cfg.drop)
        down = np.zeros(len(x), dtype=bool)
        if len(cand):  # the steepness gate only where the smoothed curve is below the baseline at all
            down[cand] = steep_gate_at(x, noise, cand, cfg.drop)
        found_dips = find_episodes(x, down, base, noise, cfg.dip)
    divergences = find_divergences(base, noise, cfg.trend) if trend else []
    return SeriesEvents(fsteps, x, base, noise, spikes, found_dips, divergences,
                        [] if allf else find_nonfinite(values), steps)


class OnlineSeriesDetector:
    """The same detectors, one ``update(step, value)`` at a time.

    Not on a product path (``watch``'s trigger composes the online detectors it needs itself, the
    guard's judge runs its own twins): this is the harness the tests use to prove the online state
    machines equal :func:`detect_series` point for point, and what ``benchmarks/analyze_speed.py``
    times as the per-point cost.

    Events are collected as they close; :meth:`finish` closes what is still open and returns the
    :class:`SeriesEvents` a whole-log run would have produced.
    """

    def __init__(self, cfg: DetectorConfig | None = None) -> None:
        self.cfg = cfg = cfg or DetectorConfig()
        self.outlier = OnlineOutlier(replace(cfg.outlier, side="up"))
        self.spikes = OnlineEpisodes(cfg.spike)
        self.dips = OnlineEpisodes(cfg.dip)
        self.gate = OnlineDropGate(cfg.outlier, cfg.drop)
        self.trend = OnlineTrend(cfg.trend)
        self.nonfinite = OnlineNonFinite()
        self._steps: list[int] = []
        self._all_steps: list[int] = []
        self._values: list[float] = []
        self._base: list[float] = []
        self._noise: list[float] = []
        self._spikes: list[Excursion] = []
        self._dips: list[Excursion] = []
        self._div: list[Divergence] = []
        self._runs: list[NonFiniteRun] = []

    def update(self, step: int, value: float) -> list:
        """Feed one point; returns the events that closed or were declared at it (may be empty)."""
        out: list = []
        self._all_steps.append(int(step))
        run = self.nonfinite.update(value)
        if run is not None:
            self._runs.append(run)
            out.append(run)
        if not math.isfinite(value):
            return out
        v = self.outlier.update(value)
        self._steps.append(int(step))
        self._values.append(float(value))
        self._base.append(v.baseline)
        self._noise.append(v.noise)
        ep = self.spikes.update(value, v.outlier, v.baseline, v.noise)
        if ep is not None:
            self._spikes.append(ep)
            out.append(ep)
        gated = self.gate.update(value, v.baseline, v.noise, self.outlier.count - 1 < self.cfg.outlier.window)
        ep = self.dips.update(value, gated, v.baseline, v.noise)
        if ep is not None:
            self._dips.append(ep)
            out.append(ep)
        d = self.trend.update(v.baseline, v.noise)
        if d is not None:
            if d.end is None:
                self._div.append(d)
            out.append(d)
        return out

    def state_dict(self) -> dict:
        """Everything needed to continue exactly where this left off (detector windows, open episodes,
        events so far), as plain Python objects; goes into the guard's checkpoint."""
        return {k: copy.deepcopy(v) for k, v in self.__dict__.items() if k != "cfg"}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned (the config stays this object's own)."""
        for k, v in state.items():
            setattr(self, k, copy.deepcopy(v))

    def finish(self) -> SeriesEvents:
        """Close open events and return everything found, in the whole-log form."""
        for machine, sink in ((self.spikes, self._spikes), (self.dips, self._dips)):
            ep = machine.finish()
            if ep is not None:
                sink.append(ep)
        run = self.nonfinite.finish()
        if run is not None:
            self._runs.append(run)
        return SeriesEvents(np.asarray(self._steps, dtype=np.int64), np.asarray(self._values),
                            np.asarray(self._base), np.asarray(self._noise), self._spikes, self._dips,
                            self._div, self._runs, np.asarray(self._all_steps, dtype=np.int64))
