"""Stitch the segments of a run into the one timeline the model really went through.

When a segment starts at a step at or before a step an earlier segment already logged (a rollback,
or a resume from an older checkpoint), the earlier points from that step on are superseded. Where a
segment starts is judged on the run's main metrics (losses, val_loss, grad_norm, lr, loss_scale)
when it has them, so a bookkeeping value a framework logs at a fixed step does not move it. They are
kept, marked dead, drawn faded in reports and excluded from analysis, exactly as a person stitching
TensorBoard or W&B curves by hand would do.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .metrics import is_main
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
        t = first.start_time
        return (t if timed and t is not None else first.first_step, first.index)

    return [i for source in sorted(by_source, key=key) for i in by_source[source]]


def _blocks(s: Series) -> list[tuple[int, int, int]]:
    """``(segment, start, end)`` of each run of equal segment labels in ``s``.

    A series is stored in segment order, so this is one slice per segment: the per-segment spans
    below are taken on views of these slices, never on masked copies of a multi-million-row column.
    """
    if not len(s):
        return []
    cuts = np.flatnonzero(s.segment[1:] != s.segment[:-1]) + 1
    bounds = [0, *cuts.tolist(), len(s)]
    return [(int(s.segment[a]), a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _main_span(segments: list[Segment], series: dict[str, Series],
               blocks: dict[str, list[tuple[int, int, int]]]) -> tuple[list[float], list[float]]:
    """First and last step of each segment on the run's main metrics (:func:`lossguard.metrics.is_main`),
    or on every metric for a segment that has none.

    A rollback point is where the model's state went back to: bookkeeping logged at a fixed step
    (Lightning writes ``hp_metric`` at step 0 at the start of every ``fit``) must not move it.
    """
    first = [float(g.first_step) for g in segments]
    last = [float(g.last_step) for g in segments]
    span: dict[int, tuple[float, float]] = {}
    for name, s in series.items():
        if not is_main(name):
            continue
        for j, a, b in blocks[name]:
            lo, hi = float(s.steps[a:b].min()), float(s.steps[a:b].max())
            old = span.get(j)
            span[j] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))
    for j, (lo, hi) in span.items():
        first[j], last[j] = lo, hi
    return first, last


def _steps_of(s: Series, blocks: list[tuple[int, int, int]], j: int) -> np.ndarray:
    """The steps segment ``j`` logged in ``s`` (a view when they are one slice, as they normally are)."""
    parts = [s.steps[a:b] for k, a, b in blocks if k == j]
    if not parts:
        return s.steps[:0]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def stitch(log: RunLog) -> RunLog:
    """Return a copy of ``log`` with segments in time order, kinds set and superseded points dead.

    Every point is kept; ``Series.alive`` is False for the dead ones. Calling it twice is harmless.
    The copy shares the step and value arrays (and the segment labels when the order is unchanged)
    with ``log``: stitching a multi-million-point log adds only the ``alive`` flags.
    """
    if log.stitched:
        return log
    order = _time_order(log.segments)
    in_order = order == list(range(len(order)))
    position = np.empty(len(order), dtype=np.int32)
    position[np.asarray(order, dtype=np.int64)] = np.arange(len(order), dtype=np.int32)
    segments = [replace(log.segments[i], index=pos) for pos, i in enumerate(order)]
    series = {name: replace(s, segment=s.segment if in_order else position[s.segment],
                            alive=np.ones(len(s), dtype=bool))
              for name, s in log.series.items()}
    blocks = {name: _blocks(s) for name, s in series.items()}

    superseded = [0] * len(segments)
    first, last = _main_span(segments, series, blocks)
    reached = -np.inf  # the largest step logged by any segment so far
    for j in range(len(segments)):
        if j and first[j] <= reached:
            for name, s in series.items():
                earlier = s.alive & (s.segment < j)
                dying = earlier & (s.steps >= first[j])
                # A bookkeeping metric the new launch logged again below its rollback point
                # (Lightning's hp_metric at step 0) replaces the earlier value at that step.
                again = _steps_of(s, blocks[name], j)
                if len(again) and again.min() < first[j]:
                    dying |= earlier & np.isin(s.steps, again)
                superseded[j] += int(dying.sum())
                s.alive[dying] = False
        reached = max(reached, last[j])

    segments = [
        replace(g, kind="start" if j == 0 else ("rollback" if superseded[j] else "resume"), superseded=superseded[j],
                first_step=int(first[j]), last_step=int(last[j]))
        for j, g in enumerate(segments)
    ]
    return replace(log, series=series, segments=segments, stitched=True)
