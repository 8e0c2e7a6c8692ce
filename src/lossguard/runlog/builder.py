"""How a reader makes a :class:`RunLog`: collect whole arrays per metric, check them once.

:class:`RunLogBuilder` takes the points a reader finds, segment by segment, and :meth:`build` checks
that inside each segment every metric's steps strictly increase (a repeat or a step backwards is
reported at its file and line). :func:`finite_or_nan` parses the spellings of non-finite numbers
that frameworks write.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from ..errors import LogFormatError
from .log import RunLog, Segment, Series


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
                                 fix="check that the file is a training log with a step column "
                                     "and at least one numeric metric")
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
    present = [w for w in parts if w is not None]
    if len(present) < len(parts):
        return None
    where = present[0] if len(present) == 1 else np.concatenate(present)
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
