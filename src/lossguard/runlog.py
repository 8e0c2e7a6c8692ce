"""RunLog: what a training run logged, as step-indexed float arrays per metric.

A run is written in *segments*: the first launch and every resume. Each point remembers its
segment (and so its source file). :func:`lossguard.stitch.stitch` orders the segments and marks the
points that a later rollback superseded as dead; analysis looks only at live points.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

import numpy as np

from .errors import LogFormatError


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


@dataclass
class _Pending:
    steps: list[np.ndarray] = field(default_factory=list)
    values: list[np.ndarray] = field(default_factory=list)
    segment: list[np.ndarray] = field(default_factory=list)
    where: list[np.ndarray | None] = field(default_factory=list)


class RunLogBuilder:
    """Collects the points a reader finds and checks them once, in :meth:`build`.

    Readers call :meth:`start_segment` at every file or restart they find, then :meth:`add` with
    whole arrays (fast path) for each metric. ``where`` optionally gives, per point, the line or
    record number it came from, so that a duplicate or backward step is reported at its line.

    Args:
        format: the reader's name.
        unit: what ``where`` numbers count, ``"line"`` or ``"record"``.
    """

    def __init__(self, format: str, *, unit: str = "line") -> None:
        self.format = format
        self.unit = unit
        self._segments: list[dict[str, Any]] = []
        self._pending: dict[str, _Pending] = {}
        self.events: list[dict[str, Any]] = []
        self.metadata: dict[str, Any] = {}
        self.sources: list[str] = []

    def start_segment(self, source: str, *, start_time: float | None = None, note: str = "") -> int:
        """Open a new segment for points read from ``source``; returns its index."""
        if source not in self.sources:
            self.sources.append(source)
        self._segments.append({"source": source, "start_time": start_time, "note": note})
        return len(self._segments) - 1

    @property
    def current_segment(self) -> int:
        """Index of the segment points are added to (opens one for the first source if needed)."""
        if not self._segments:
            raise RuntimeError("start_segment() must be called before add()")
        return len(self._segments) - 1

    def add(self, metric: str, steps: Sequence[int] | np.ndarray, values: Sequence[float] | np.ndarray,
            *, where: Sequence[int] | np.ndarray | None = None, segment: int | None = None) -> None:
        """Add points of one metric to a segment (the current one by default)."""
        seg = self.current_segment if segment is None else segment
        steps = np.asarray(steps, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        if steps.shape != values.shape:
            raise ValueError(f"{metric}: {len(steps)} steps but {len(values)} values")
        if not len(steps):
            return
        p = self._pending.setdefault(metric, _Pending())
        p.steps.append(steps)
        p.values.append(values)
        p.segment.append(np.full(len(steps), seg, dtype=np.int32))
        p.where.append(None if where is None else np.asarray(where, dtype=np.int64))

    def add_event(self, record: dict[str, Any]) -> None:
        """Keep a non-metric record (it must have ``step`` and ``event``)."""
        self.events.append(record)

    def build(self) -> RunLog:
        """Check every segment's steps and return the RunLog (unstitched).

        Raises:
            LogFormatError: no numeric point at all, or, inside one segment, a metric whose steps go
                backwards or repeat; the message names the file and the line.
        """
        series: dict[str, Series] = {}
        for metric, p in self._pending.items():
            # One part (the common case) is used as is: no copy, and readers may share one steps
            # array between metrics to keep memory near the size of the raw columns.
            steps = p.steps[0] if len(p.steps) == 1 else np.concatenate(p.steps)
            values = p.values[0] if len(p.values) == 1 else np.concatenate(p.values)
            segment = p.segment[0] if len(p.segment) == 1 else np.concatenate(p.segment)
            in_order = len(segment) < 2 or bool(np.all(segment[1:] >= segment[:-1]))
            order = None if in_order else np.argsort(segment, kind="stable")
            if order is not None:
                steps, values, segment = steps[order], values[order], segment[order]
                where = _concat_where(p.where, order)
            else:
                where = _concat_where(p.where, None)
            self._check_order(metric, steps, segment, where)
            series[metric] = Series(steps, values, segment, np.ones(len(steps), dtype=bool))
        if not series:
            source = self.sources[0] if self.sources else None
            raise LogFormatError("no numeric metric values found", path=source,
                                 fix="check that the file is a training log with a step column and at least one numeric metric")
        segments = []
        for i, info in enumerate(self._segments):
            firsts = [s.steps[s.segment == i] for s in series.values()]
            firsts = [f for f in firsts if len(f)]
            if not firsts:
                continue  # a restart banner followed by no metric at all
            segments.append(Segment(index=i, source=info["source"], first_step=int(min(f.min() for f in firsts)),
                                    last_step=int(max(f.max() for f in firsts)), start_time=info["start_time"],
                                    note=info["note"]))
        segments, series = _renumber(segments, series)
        return RunLog(series=series, segments=segments, format=self.format, sources=list(self.sources),
                      events=self.events, metadata=self.metadata)

    def _check_order(self, metric: str, steps: np.ndarray, segment: np.ndarray, where: np.ndarray | None) -> None:
        if len(steps) < 2:
            return
        same_segment = segment[1:] == segment[:-1]
        bad = np.flatnonzero(same_segment & (np.diff(steps) <= 0))
        if not len(bad):
            return
        i = int(bad[0]) + 1
        source = self._segments[int(segment[i])]["source"]
        place = f"{self.unit} {int(where[i])}" if where is not None else f"point {i}"
        if steps[i] == steps[i - 1]:
            what = f"duplicate step {int(steps[i])} for metric '{metric}'"
            fix = ("remove the repeated rows, or if the run restarted and appended to this file, "
                   "split it into one file per launch or add a 'segment' column")
        else:
            what = f"steps go backwards for metric '{metric}': {int(steps[i - 1])} then {int(steps[i])}"
            fix = ("if the run was resumed or rolled back into the same file, split it into one file "
                   "per launch (read them together) or add a 'segment' column numbering the launches")
        raise LogFormatError(what, path=source, where=place, fix=fix)


def _concat_where(parts: list[np.ndarray | None], order: np.ndarray | None) -> np.ndarray | None:
    if any(w is None for w in parts):
        return None
    where = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return where if order is None else where[order]


def _renumber(segments: list[Segment], series: dict[str, Series]) -> tuple[list[Segment], dict[str, Series]]:
    """Drop empty segments and make indices contiguous."""
    mapping = np.full(max((g.index for g in segments), default=-1) + 2, -1, dtype=np.int32)
    for new, g in enumerate(segments):
        mapping[g.index] = new
    if all(g.index == i for i, g in enumerate(segments)):
        return segments, series
    segments = [replace(g, index=i) for i, g in enumerate(segments)]
    series = {k: replace(s, segment=mapping[s.segment]) for k, s in series.items()}
    return segments, series


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


def finite_or_nan(text: str) -> float:
    """Parse a logged number, accepting the spellings frameworks use for non-finite values."""
    t = text.strip().lower()
    if t in ("nan", "-nan", "+nan"):
        return math.nan
    if t in ("inf", "+inf", "infinity", "+infinity"):
        return math.inf
    if t in ("-inf", "-infinity"):
        return -math.inf
    return float(t)
