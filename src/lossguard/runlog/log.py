"""The data of a read log: :class:`RunLog`, its :class:`Series` per metric and its :class:`Segment` s.

A segment is one launch or resume of the run; every point remembers its segment (and so its
source file) and whether a later rollback superseded it (``alive``). :func:`merge` concatenates the
RunLogs read from several files into one, keeping segment order.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable

import numpy as np


@dataclass(frozen=True)
class Segment:
    """One contiguous stretch of logging: the first launch or one resume of the run.

    Attributes:
        index: position in :attr:`RunLog.segments` (time order after stitching).
        source: the file the segment was read from.
        first_step: smallest step logged in the segment (any metric; once stitched, on the main
            metrics when the segment has any, see :func:`lossguard.stitch.stitch`).
        last_step: largest step logged in the segment (likewise).
        start_time: Unix time of its first point where the format records wall time, else None.
        kind: ``"start"`` for the first segment, ``"resume"`` when it continues after the previous
            one, ``"rollback"`` when it starts at or before a step already logged (set by stitch).
        superseded: how many earlier points this segment made dead (set by stitch).
        note: how the boundary was found, e.g. ``"restart banner at line 210"``.
    """

    index: int
    source: str
    first_step: int
    last_step: int
    start_time: float | None = None
    kind: str = "start"
    superseded: int = 0
    note: str = ""


@dataclass
class Series:
    """The points of one metric, in segment order, then step order.

    Attributes:
        steps: int64 optimizer steps.
        values: float64 values; NaN and Inf are kept exactly as logged.
        segment: int32 index of the segment each point came from.
        alive: False for points superseded by a later rollback (all True before stitching).
    """

    steps: np.ndarray
    values: np.ndarray
    segment: np.ndarray
    alive: np.ndarray

    def __len__(self) -> int:
        return len(self.steps)

    def live(self) -> tuple[np.ndarray, np.ndarray]:
        """Steps and values of the live points, sorted by step: the timeline the model went through."""
        if self.alive.all():
            steps, values = self.steps, self.values
        else:
            steps, values = self.steps[self.alive], self.values[self.alive]
        if len(steps) > 1 and np.any(np.diff(steps) <= 0):
            order = np.argsort(steps, kind="stable")
            steps, values = steps[order], values[order]
        return steps, values


@dataclass
class RunLog:
    """Everything read from one run.

    Attributes:
        series: metric name (see :mod:`lossguard.metrics`) -> its points.
        segments: the segments the run was written in.
        format: name of the reader that produced it (``"csv"``, ``"tensorboard"``, ...), or
            ``"mixed"`` when several formats were merged.
        sources: the files read, in reading order.
        events: non-metric records with a ``"step"`` and an ``"event"`` key (for example the guard's
            ``skip`` and ``rollback`` decisions), in log order.
        metadata: free-form facts a reader found (framework version, run name, ...).
        stitched: True once :func:`lossguard.stitch.stitch` has run.
    """

    series: dict[str, Series]
    segments: list[Segment]
    format: str
    sources: list[str]
    events: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    stitched: bool = False

    @property
    def metrics(self) -> list[str]:
        """Metric names, sorted."""
        return sorted(self.series)

    def live(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """Live steps and values of ``metric``; raises ``KeyError`` naming what is there."""
        if metric not in self.series:
            raise KeyError(f"no metric {metric!r} in this log; it has {', '.join(self.metrics) or 'none'}")
        return self.series[metric].live()

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description: format, metrics, steps, segments, rollbacks, dead and non-finite points."""
        metrics = {}
        for name in self.metrics:
            s = self.series[name]
            finite = np.isfinite(s.values)
            metrics[name] = {
                "points": int(len(s)),
                "live_points": int(s.alive.sum()),
                "dead_points": int(len(s) - s.alive.sum()),
                "first_step": int(s.steps.min()) if len(s) else None,
                "last_step": int(s.steps.max()) if len(s) else None,
                "nan": int(np.isnan(s.values).sum()),
                "inf": int((~finite & ~np.isnan(s.values)).sum()),
                "first_nonfinite_step": int(s.steps[~finite][0]) if (~finite).any() else None,
            }
        all_steps = [s.steps for s in self.series.values() if len(s)]
        return {
            "format": self.format,
            "sources": list(self.sources),
            "first_step": int(min(a.min() for a in all_steps)) if all_steps else None,
            "last_step": int(max(a.max() for a in all_steps)) if all_steps else None,
            "metrics": metrics,
            "segments": [
                {"index": g.index, "source": g.source, "first_step": g.first_step,
                 "last_step": g.last_step, "kind": g.kind, "superseded": g.superseded,
                 "start_time": g.start_time, "note": g.note}
                for g in self.segments
            ],
            "resumes": sum(g.kind == "resume" for g in self.segments),
            "rollbacks": sum(g.kind == "rollback" for g in self.segments),
            "dead_points": sum(int(len(s) - s.alive.sum()) for s in self.series.values()),
            "events": len(self.events),
            "stitched": self.stitched,
        }


def merge(logs: Iterable[RunLog]) -> RunLog:
    """Concatenate several unstitched RunLogs (e.g. one per file) into one, keeping segment order."""
    logs = list(logs)
    if len(logs) == 1:
        return logs[0]
    series: dict[str, list[Series]] = {}
    segments: list[Segment] = []
    events: list[dict[str, Any]] = []
    sources: list[str] = []
    metadata: dict[str, Any] = {}
    for log in logs:
        offset = len(segments)
        segments.extend(replace(g, index=g.index + offset) for g in log.segments)
        for name, s in log.series.items():
            series.setdefault(name, []).append(replace(s, segment=s.segment + np.int32(offset)))
        events.extend(log.events)
        sources.extend(x for x in log.sources if x not in sources)
        warnings = list(metadata.get("warnings", [])) + list(log.metadata.get("warnings", []))
        metadata.update(log.metadata)
        if warnings:  # readers' warnings (e.g. a truncated last record) are kept from every file
            metadata["warnings"] = warnings
    formats = {log.format for log in logs}
    merged = {
        name: Series(np.concatenate([p.steps for p in parts]), np.concatenate([p.values for p in parts]),
                     np.concatenate([p.segment for p in parts]), np.concatenate([p.alive for p in parts]))
        for name, parts in series.items()
    }
    return RunLog(series=merged, segments=segments, format=formats.pop() if len(formats) == 1 else "mixed",
                  sources=sources, events=events, metadata=metadata)
