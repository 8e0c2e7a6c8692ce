"""RunHistory: the newest points of a live run, bounded, as the RunLog that ``analyze`` reads.

The followers (:mod:`.follower`) hand over :class:`Points` as files grow. The history keeps them
per metric in arrival order with the segment (launch) each came from, drops the oldest points once
a metric holds more than ``capacity`` of them, and builds an unstitched
:class:`~lossguard.runlog.RunLog` of what it holds on demand (``analyze`` stitches it exactly as it
stitches a log read from disk). Memory is therefore flat however long the run: about 25 bytes per
kept point and metric.
"""
from __future__ import annotations

import math
from array import array
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..runlog import RunLog, Segment, Series


@dataclass
class Points:
    """New points read from one source (file) since the last poll.

    Attributes:
        source: the file they were read from.
        series: metric name -> (steps, values), steps ascending within this batch.
        new_segment: True when these points begin a new launch of that source (a restart banner,
            a rollback event, a file rotated or truncated, steps that went back).
        note: how that boundary was found (kept in the segment, as readers do).
        start_time: Unix time the segment began where the format records it, else None.
        events: non-metric records (guard actions, fp16 overflows) that came with the points.
    """

    source: str
    series: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    new_segment: bool = False
    note: str = ""
    start_time: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    join: str | None = None
    """Another source whose current segment these points belong to (TensorBoard ``add_scalars``
    stream files are written beside the main event file by the same launch)."""

    @property
    def count(self) -> int:
        """Number of points over every metric."""
        return sum(len(s) for s, _ in self.series.values())


@dataclass
class _Segment:
    source: str
    start_time: float | None
    note: str


class _Column:
    """One metric's kept points, as growable typed arrays (8+8+4 bytes a point)."""

    def __init__(self) -> None:
        self.steps = array("q")
        self.values = array("d")
        self.segment = array("l")

    def __len__(self) -> int:
        return len(self.steps)

    def drop_front(self, n: int) -> None:
        del self.steps[:n]
        del self.values[:n]
        del self.segment[:n]


class RunHistory:
    """The bounded, segment-aware store of a live run.

    Args:
        capacity: points kept per metric; older ones are dropped in blocks of ``block``.
        block: how many points are dropped at once. A multiple of the outlier test's refresh
            stride (32), so the trailing statistics of the points kept are computed at the same
            points as on the whole log.
        max_events: non-metric records kept (newest).
    """

    def __init__(self, *, capacity: int = 16384, block: int = 1024, max_events: int = 1000) -> None:
        if capacity < block or block < 1:
            raise ValueError(f"capacity ({capacity}) must be >= block ({block}) >= 1")
        self.capacity = capacity
        self.block = block
        self._columns: dict[str, _Column] = {}
        self._segments: list[_Segment] = []
        self._current: dict[str, int] = {}  # source -> its segment id now being written
        self._events: deque = deque(maxlen=max_events)
        self._dropped: dict[str, int] = {}
        self._first_kept: dict[str, int] = {}  # metric -> step of its oldest kept point, once trimmed
        self.sources: list[str] = []
        self.total_points = 0
        self.out_of_order = 0
        self.last_step: int | None = None

    def dropped(self, metric: str) -> int:
        """How many points of ``metric`` were dropped from the front so far."""
        return self._dropped.get(metric, 0)

    def first_kept_step(self, metric: str) -> int | None:
        """Step of the oldest point of ``metric`` still kept, or None when nothing was dropped."""
        return self._first_kept.get(metric)

    def add(self, pts: Points) -> None:
        """Append a batch of points (opening a segment when the batch or the source is new)."""
        if pts.source not in self.sources:
            self.sources.append(pts.source)
        if pts.join is not None and pts.join in self._current:
            self._current[pts.source] = self._current[pts.join]  # an add_scalars stream file: same launch
        elif pts.new_segment or pts.source not in self._current:
            self._open(pts.source, pts.start_time, pts.note)
        self._events.extend(pts.events)
        for metric, (steps, values) in pts.series.items():
            col = self._columns.setdefault(metric, _Column())
            for s, v in zip(np.asarray(steps, dtype=np.int64).tolist(),
                            np.asarray(values, dtype=np.float64).tolist(), strict=True):
                seg = self._current[pts.source]
                if len(col) and col.segment[-1] == seg and s <= col.steps[-1]:
                    if s == col.steps[-1]:  # the same step written again (a later line wins, as in readers)
                        col.values[-1] = v
                    else:  # decoders start a segment where a launch restarts; a stray backward
                        self.out_of_order += 1  # bookkeeping value (an epoch counter) is dropped
                    continue
                col.steps.append(s)
                col.values.append(v if not math.isnan(v) else math.nan)
                col.segment.append(seg)
                self.total_points += 1
                self.last_step = s if self.last_step is None else max(self.last_step, s)
            self._trim(metric, col)

    def _open(self, source: str, start_time: float | None, note: str) -> int:
        self._segments.append(_Segment(source, start_time, note))
        self._current[source] = len(self._segments) - 1
        return self._current[source]

    def _trim(self, metric: str, col: _Column) -> None:
        over = len(col) - self.capacity
        if over <= 0:
            return
        n = -(-over // self.block) * self.block
        col.drop_front(n)
        self._dropped[metric] = self._dropped.get(metric, 0) + n
        self._first_kept[metric] = col.steps[0] if len(col) else 0

    def points(self, metric: str) -> int:
        """Points of ``metric`` kept now."""
        col = self._columns.get(metric)
        return len(col) if col is not None else 0

    @property
    def metrics(self) -> list[str]:
        """Metrics seen so far."""
        return sorted(self._columns)

    def to_runlog(self, format: str = "watch") -> RunLog | None:
        """The kept points as an unstitched RunLog (segments renumbered in creation order), or None
        while there is no point at all."""
        used = sorted({int(x) for c in self._columns.values() for x in set(c.segment)}) if self._columns else []
        if not used:
            return None
        remap = np.full(len(self._segments), -1, dtype=np.int32)
        remap[np.asarray(used)] = np.arange(len(used), dtype=np.int32)
        series: dict[str, Series] = {}
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for name, c in self._columns.items():
            if not len(c):
                continue
            steps = np.frombuffer(c.steps, dtype=np.int64).copy()
            seg = remap[np.frombuffer(c.segment, dtype=np.int64 if c.segment.itemsize == 8 else np.int32)]
            series[name] = Series(steps, np.frombuffer(c.values, dtype=np.float64).copy(), seg.astype(np.int32),
                                  np.ones(len(steps), dtype=bool))
            for g in np.unique(seg).tolist():
                s = steps[seg == g]
                first[g] = min(first.get(g, int(s[0])), int(s.min()))
                last[g] = max(last.get(g, int(s[-1])), int(s.max()))
        segments = [Segment(index=i, source=self._segments[g].source, first_step=first[i], last_step=last[i],
                            start_time=self._segments[g].start_time, note=self._segments[g].note)
                    for i, g in enumerate(used)]
        return RunLog(series=series, segments=segments, format=format, sources=list(self.sources),
                      events=list(self._events))
