"""One Megatron / DeepSpeed stdout log read line by line: the launches it holds and their points.

:func:`read_line` feeds one line into the list of :class:`Launch` objects (a new one opens at a
restart: a start banner, or an iteration number at or below the previous one); :func:`flush_pending`
counts the fp16 overflows waiting for their step. The reader (:mod:`lossguard.io.megatron`) feeds a
whole file; ``lossguard watch`` (:mod:`lossguard.watch.lines`) feeds the lines a live run appends,
so both cut launches and count overflows by the same rules.
"""
from __future__ import annotations

import re

from ..metrics import LOSS, LOSS_SCALE, LR, SKIPPED_ITERS, is_loss
from ..runlog import RunLogBuilder, finite_or_nan
from .megatron_lines import Overflow, count_overflows, parse_iteration, parse_overflow, parse_validation, stamp
from .text.crash import crash_step

ENGINE = re.compile(r"\[Rank\s+(\d+)\]\s+step=(\d+),\s*skipped=(\d+),\s*lr=\[\s*([^,\]\s]+)")
"""DeepSpeed's engine line: groups (rank, step, skipped steps so far, first group's lr)."""
BANNER = re.compile(r"using world size:|> building \S+ tokenizer|^\s*(?:\[[^\]]*\]\s*)?training \.\.\.|"
                    r"\[before the start of training step\]|DeepSpeed info: version=")
"""A start banner: a line each launch prints once before training (a restart when seen again)."""

# Priority of a value's source when two report the same metric at the same step.
_FROM_ITERATION, _FROM_OVERFLOW, _FROM_ENGINE = 2, 1, 0


class Launch:
    """The points of one launch (a process start) of the run, as its lines are read.

    Attributes:
        note: how the launch's start was found (shown as the segment's note).
        start_time: Unix time of the first stamped line, or None.
        points: metric -> step -> (value, line number, priority of the source that gave it).
        pending: (overflow, line) pairs waiting for the step they are counted into.
    """

    def __init__(self, note: str) -> None:
        self.note = note
        self.start_time: float | None = None
        self.points: dict[str, dict[int, tuple[float, int, int]]] = {}
        self.last_iteration = -1
        self.last_engine = -1
        self.last_engine_skipped: int | None = None
        self.last_line = ""
        self.pending: list[tuple[Overflow, int]] = []  # (overflow, line) waiting for the step they belong to

    def put(self, metric: str, step: int, value: float, line: int, prio: int) -> None:
        """Record a point unless one of higher priority is already there for that step."""
        table = self.points.setdefault(metric, {})
        old = table.get(step)
        if old is None or prio >= old[2]:
            table[step] = (value, line, prio)

    @property
    def reached(self) -> int:
        """The largest step this launch logged anything at (-1 before any)."""
        return max(self.last_iteration, self.last_engine)

    @property
    def empty(self) -> bool:
        """True while the launch has produced nothing (a banner then opens no new segment)."""
        return not self.points and not self.pending


def read_line(line: str, number: int, segments: list[Launch], builder: RunLogBuilder) -> None:
    """Read one line (numbered ``number``) into the newest launch of ``segments``, opening a new one at
    a restart; events and warnings go to ``builder``."""
    seg = segments[-1]
    if "iteration" in line:
        it = parse_iteration(line)
        if it is not None:
            if it.text == seg.last_line:
                return  # the same line printed twice (several ranks, or tee): not a restart
            step = it.step
            if step <= seg.last_iteration:
                seg = _new_segment(segments, f"iteration {step} after {seg.last_iteration} at line {number}")
            if seg.start_time is None:
                seg.start_time = stamp(line)
            interval = step - seg.last_iteration if seg.last_iteration >= 0 else None
            seg.last_iteration = step
            seg.last_line = it.text
            flush_pending(seg, builder, step=step)
            for name, value in _without_empty_loss(it.metrics, interval).items():
                seg.put(name, step, value, number, _FROM_ITERATION)
            return
        val = parse_validation(line)
        if val is not None:
            for name, value in val.metrics.items():
                seg.put(name, val.step, value, number, _FROM_ITERATION)
            return
    if "verflow" in line or "VERFLOW" in line:
        ov = parse_overflow(line)
        if ov is not None:
            seg.pending.append((ov, number))
            return
    if "step=" in line:
        m = ENGINE.search(line)
        if m is not None:
            step, skipped = int(m.group(2)), int(m.group(3))
            if step <= seg.last_engine:
                seg = _new_segment(segments, f"DeepSpeed step {step} after {seg.last_engine} at line {number}")
            if seg.start_time is None:
                seg.start_time = stamp(line)
            flush_pending(seg, builder, step=step)
            if seg.last_engine_skipped is not None and skipped >= seg.last_engine_skipped:
                seg.put(SKIPPED_ITERS, step, float(skipped - seg.last_engine_skipped), number, _FROM_ENGINE)
            seg.last_engine, seg.last_engine_skipped = step, skipped
            try:
                seg.put(LR, step, finite_or_nan(m.group(4)), number, _FROM_ENGINE)
            except ValueError:
                pass
            return
    if ("rror" in line or "xception" in line) and ("nan" in line or "NaN" in line or "inf" in line):
        hit = crash_step(line)
        if hit is not None and hit[1] is not None and hit[1] > seg.reached:
            # Megatron raises on a NaN loss by default: the crash line is the NaN's only trace.
            seg.put(LOSS, hit[1], float("nan"), number, _FROM_ITERATION)
            builder.metadata.setdefault("warnings", []).append(
                f"line {number} stops the run on a non-finite value at iteration {hit[1]}: read as a NaN loss there")
            return
    if BANNER.search(line) is not None:
        # DeepSpeed prints its engine state (step=0) while it initialises, before the training
        # banner of the same launch: only a segment that got past step 0 was a launch of its own.
        if not seg.empty and seg.reached > 0:
            seg = _new_segment(segments, f"restart banner at line {number}: {line.strip()[:60]}")
        if seg.start_time is None:
            seg.start_time = stamp(line)


def _without_empty_loss(metrics: dict[str, float], interval: int | None) -> dict[str, float]:
    """The metrics of an iteration line, less a loss of exactly 0 when every iteration of the interval
    was skipped: Megatron averages the loss over the iterations it did not skip, so with none left it
    prints ``lm loss: 0.000000E+00``, which is no loss value."""
    skipped = metrics.get(SKIPPED_ITERS)
    if interval is None or skipped is None or skipped < interval:
        return metrics
    return {k: v for k, v in metrics.items() if not (is_loss(k) and v == 0.0)}


def _new_segment(segments: list[Launch], note: str) -> Launch:
    seg = Launch(note)
    segments.append(seg)
    return seg


def flush_pending(seg: Launch, builder: RunLogBuilder, *, step: int | None = None) -> None:
    """Count the overflows seen since the last logged step into ``step`` (the interval's end)."""
    if not seg.pending:
        return
    if step is None:
        last = max(seg.last_iteration, seg.last_engine)
        if last < 0:
            return  # overflows before any step of this launch: nothing to attach them to
        step = last + 1  # the step in progress when the log ended
    counted = count_overflows(seg.pending, step)
    for event in counted.events:
        builder.add_event(event)
    seg.put(SKIPPED_ITERS, step, counted.skipped, counted.line, _FROM_OVERFLOW)
    seg.put(LOSS_SCALE, step, counted.scale, counted.line, _FROM_OVERFLOW)
    seg.pending = []


