"""Stitch the segments of a run into the one timeline the model really went through.

When a segment starts at a step at or before a step an earlier segment already logged (a rollback,
or a resume from an older checkpoint), the earlier points from that step on are superseded. They are
kept, marked dead, drawn faded in reports and excluded from analysis, exactly as a person stitching
TensorBoard or W&B curves by hand would do.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .runlog import RunLog, Segment, Series


def _time_order(segments: list[Segment]) -> list[int]:
    """Indices of ``segments`` in the order they were written.

    Segments of one source keep their order in that source (a file is written forwards). Sources
    are ordered by wall time when every source records it, otherwise by their first step.
    """
    by_source: dict[str, list[int]] = {}
    for i, g in enumerate(segments):
        by_source.setdefault(g.source, []).append(i)
    timed = all(segments[idx[0]].start_time is not None for idx in by_source.values())

    def key(source: str) -> tuple[float, int]:
        first = segments[by_source[source][0]]
        return (first.start_time if timed else first.first_step, first.index)

    return [i for source in sorted(by_source, key=key) for i in by_source[source]]


def stitch(log: RunLog) -> RunLog:
    """Return a copy of ``log`` with segments in time order, kinds set and superseded points dead.

    Every point is kept; ``Series.alive`` is False for the dead ones. Calling it twice is harmless.
    """
    if log.stitched:
        return log
    order = _time_order(log.segments)
    position = np.empty(len(order), dtype=np.int32)
    position[np.asarray(order, dtype=np.int64)] = np.arange(len(order), dtype=np.int32)
    segments = [replace(log.segments[i], index=pos) for pos, i in enumerate(order)]
    series = {name: replace(s, segment=position[s.segment], alive=np.ones(len(s), dtype=bool))
              for name, s in log.series.items()}

    superseded = [0] * len(segments)
    reached = -np.inf  # the largest step logged by any segment so far
    for j, g in enumerate(segments):
        if j and g.first_step <= reached:
            for s in series.values():
                dying = s.alive & (s.segment < j) & (s.steps >= g.first_step)
                superseded[j] += int(dying.sum())
                s.alive[dying] = False
        reached = max(reached, g.last_step)

    segments = [
        replace(g, kind="start" if j == 0 else ("rollback" if superseded[j] else "resume"), superseded=superseded[j])
        for j, g in enumerate(segments)
    ]
    return replace(log, series=series, segments=segments, stitched=True)
