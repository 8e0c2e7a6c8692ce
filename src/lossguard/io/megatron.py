"""Read the stdout logs of Megatron-LM, Megatron-DeepSpeed and DeepSpeed into a RunLog.

What is read (everything else in the log is ignored; these logs are full of other output):

* Megatron iteration lines, ``iteration 31214/ 95367 | ... | lm loss: 2.198845E+00 | loss scale:
  4096.0 | grad norm: 0.242 | number of skipped iterations: 0 | number of nan iterations: 0 |``.
  Every ``key: number`` field becomes a metric through :func:`lossguard.metrics.canonical_name`;
  ``lm loss <stream>`` becomes the stream ``loss/<stream>``; a ``(ms)`` unit is converted to
  seconds (``elapsed time per iteration (ms)`` -> ``iter_time`` in s).
* Validation lines, ``validation loss at iteration 1000 | lm loss value: 2.34 | lm loss PPL: 10.4 |``
  -> ``val_loss`` (and ``val_ppl``); the test set (``... on test set``) -> ``test_lm_loss``.
* DeepSpeed fp16 overflows, ``[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale:
  65536, reducing to 32768`` (the fused fp16 optimizer's ``fp16 dynamic loss scale overflow! Skipping
  step. Attempted loss scale: ...`` too). The line carries no step: overflows are counted into the next logged
  step (the logging interval they happened in, as Megatron's own "number of skipped iterations"),
  giving ``skipped_iters`` (count, the largest over ranks) and ``loss_scale`` (the reduced scale).
  Each one is also kept as an event ``{"event": "fp16_overflow", ...}``.
* DeepSpeed engine lines, ``[Rank 0] step=100, skipped=3, lr=[0.0001], mom=[(0.9, 0.95)]`` ->
  ``lr`` (first parameter group) and ``skipped_iters`` (the increase of ``skipped`` since the
  previous such line).
  A value the iteration line itself reports wins over one derived from these lines.

Restarts inside one file (a job chain appending to one log with ``tee -a``): a start banner
(``using world size:``, ``> building ... tokenizer``, ``training ...``, ``[before the start of
training step]``, ``DeepSpeed info: version=``) or an iteration number at or below the previous one
starts a new segment. Steps going backwards are therefore restarts, never errors;
:func:`lossguard.stitch.stitch` marks what they superseded. Timestamps (``[2024-05-01 12:00:00]``,
``datetime: 2022-04-12 10:00:00``) give a segment's ``start_time``, read as UTC.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from ..errors import LogFormatError
from ..metrics import LOSS, LOSS_SCALE, LR, SKIPPED_ITERS, VAL_LOSS, canonical_name, is_loss
from ..runlog import RunLog, RunLogBuilder, finite_or_nan
from .text.crash import crash_step

NAME = "megatron"
"""Registry name of this reader."""

ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)")
"""A Megatron iteration line: groups (step, total iterations, the ``|``-separated fields)."""
VALIDATION = re.compile(r"validation loss at iteration\s+(\d+)(?:\s+on\s+(\w+)\s+set)?\s*\|(.*)")
"""A Megatron validation line: groups (step, ``test`` for the test set or None, the fields)."""
OVERFLOW = re.compile(r"(?:OVERFLOW!|loss scale overflow!)\s*(?:Rank\s+(\d+)\s+)?Skipping step\.?\s*"
                      r"Attempted loss scale:\s*([-+.\w]+)(?:,\s*reducing to\s*([-+.\w]+))?", re.I)
"""DeepSpeed's fp16 overflow line, worded two ways: its DynamicLossScaler's ``OVERFLOW! Rank 0 Skipping
step.`` and its fused fp16 optimizer's ``fp16 dynamic loss scale overflow! Skipping step.``."""
_ENGINE = re.compile(r"\[Rank\s+(\d+)\]\s+step=(\d+),\s*skipped=(\d+),\s*lr=\[\s*([^,\]\s]+)")
_BANNER = re.compile(r"using world size:|> building \S+ tokenizer|^\s*(?:\[[^\]]*\]\s*)?training \.\.\.|"
                     r"\[before the start of training step\]|DeepSpeed info: version=")
_STAMP = re.compile(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)")
_UNIT = re.compile(r"\s*\(([^)]*)\)\s*")
# The lines that make a file a Megatron / DeepSpeed log, one pattern each: a pattern that starts with
# a literal is searched at bytes.find speed (an alternation, or a leading \b, is ~20x slower).
_SNIFF_ITERATION = re.compile(rb"iteration\s+\d+\s*/\s*\d+\s*\|")
_SNIFF_ENGINE = re.compile(rb"\[Rank\s+\d+\]\s+step=\d+,\s*skipped=\d+")
_SNIFF_OVERFLOW = re.compile(rb"OVERFLOW!\s*Rank\s+\d+\s+Skipping step")

# Priority of a value's source when two report the same metric at the same step.
_FROM_ITERATION, _FROM_OVERFLOW, _FROM_ENGINE = 2, 1, 0


# Start-up output of these launchers: the argument dump, the world size, DeepSpeed's own logger.
_STARTUP = re.compile(rb"using world size:|-{8,} arguments -{8,}|\bmegatron\b|\bdeepspeed\b|DeepSpeed info:|"
                      rb"> building \S+ tokenizer|torch\.distributed", re.IGNORECASE)
SCAN_BYTES = 32 * 1024 * 1024
"""How far past the head :func:`sniff` looks for the first iteration line when the head is a
launcher's start-up output: real runs print 100 KB to several MB (arguments, NCCL, model summary)
before their first iteration."""
_CHUNK = 1024 * 1024


def first_line(data: bytes, *, overflow: bool = True) -> int:
    """Offset of the first Megatron iteration or DeepSpeed engine line in ``data``, or -1.

    Args:
        data: raw bytes of the log (any part of it).
        overflow: also count DeepSpeed overflow lines, which a pasted DeepSpeed run prints too
            (:mod:`lossguard.io.pasted` asks without them).
    """
    patterns = (_SNIFF_ITERATION, _SNIFF_ENGINE, _SNIFF_OVERFLOW) if overflow else (_SNIFF_ITERATION, _SNIFF_ENGINE)
    first = -1
    for pattern in patterns:
        for m in pattern.finditer(data, 0, len(data) if first < 0 else first):
            at = m.start()
            if pattern is _SNIFF_ITERATION and at and (data[at - 1:at].isalnum() or data[at - 1:at] == b"_"):
                continue  # "...iteration 5/10 |" inside a longer word is not the iteration line
            first = at
            break
    return first


def sniff(path: Path, head: bytes) -> bool:
    """True when the file holds a Megatron iteration line or a DeepSpeed step/overflow line.

    The head (the first 64 KiB) is searched first. When it is text that looks like a Megatron or
    DeepSpeed start-up (argument dump, world size, DeepSpeed logger lines) but has no iteration
    line yet, the file is searched further, up to :data:`SCAN_BYTES`, a chunk at a time.
    """
    if first_line(head) >= 0:
        return _SNIFF_ITERATION.search(head) is not None or not _grammar_reads(head)
    if b"\0" in head or _STARTUP.search(head) is None or not Path(path).is_file():
        return False  # (a pipe or FIFO cannot be read a second time)
    try:
        with open(path, "rb") as fh:
            fh.seek(len(head))
            tail = head[-512:]  # a line cut at a chunk boundary is searched whole
            for _ in range(SCAN_BYTES // _CHUNK):
                chunk = fh.read(_CHUNK)
                if not chunk:
                    return False
                window = tail + chunk
                if first_line(window) >= 0:
                    return True
                tail = chunk[-512:]
    except OSError:
        return False
    return False


def _grammar_reads(head: bytes) -> bool:
    """True when a head without Megatron iteration lines has loss lines the text grammar reads: the
    DeepSpeed engine's ``[Rank 0] step=N, skipped=...`` lines (no loss) must not take a file whose
    loss is printed otherwise (``steps: 10 loss: 2.5 ...``)."""
    from . import text

    return text.head_claims(head)


class _Segment:
    """Points of one launch: metric -> step -> (value, line, priority)."""

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


def read(path: Path, *, root: Path | None = None) -> RunLog:
    """Read one Megatron / DeepSpeed stdout log as an unstitched RunLog.

    Raises:
        LogFormatError: the file is unreadable, empty, or holds no iteration line at all.
    """
    path = Path(path)
    try:
        fh = open(path, encoding="utf-8", errors="replace", newline=None)
    except OSError as exc:
        raise LogFormatError(f"cannot read the file: {exc.strerror or exc}", path=path,
                             fix="check that the path exists and is a readable text log") from None
    builder = RunLogBuilder(NAME, unit="line")
    segments: list[_Segment] = [_Segment("start of file")]
    with fh:
        try:
            for number, line in enumerate(fh, 1):
                _read_line(line, number, segments, builder)
        except (OSError, UnicodeError) as exc:
            raise LogFormatError(f"cannot read the file: {exc}", path=path, fix="check the file") from None
    for seg in segments:
        _flush_pending(seg, builder)
    if not any(seg.points for seg in segments):
        raise LogFormatError(
            "no Megatron or DeepSpeed iteration line found", path=path,
            fix="this reader expects stdout lines like ' iteration 100/ 1000 | lm loss: 2.1E+00 | ...' or "
                "'[Rank 0] step=100, skipped=0, lr=[...]'; for CSV or JSONL logs use that format")
    for seg in segments:
        if not seg.points:
            continue
        index = builder.start_segment(str(path), start_time=seg.start_time, note=seg.note)
        for metric, table in seg.points.items():
            steps = sorted(table)
            builder.add(metric, steps, [table[s][0] for s in steps], where=[table[s][1] for s in steps],
                        segment=index)
    return builder.build()


def _read_line(line: str, number: int, segments: list[_Segment], builder: RunLogBuilder) -> None:
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
                seg.start_time = _stamp(line)
            interval = step - seg.last_iteration if seg.last_iteration >= 0 else None
            seg.last_iteration = step
            seg.last_line = it.text
            _flush_pending(seg, builder, step=step)
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
        m = _ENGINE.search(line)
        if m is not None:
            step, skipped = int(m.group(2)), int(m.group(3))
            if step <= seg.last_engine:
                seg = _new_segment(segments, f"DeepSpeed step {step} after {seg.last_engine} at line {number}")
            if seg.start_time is None:
                seg.start_time = _stamp(line)
            _flush_pending(seg, builder, step=step)
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
    if _BANNER.search(line) is not None:
        # DeepSpeed prints its engine state (step=0) while it initialises, before the training
        # banner of the same launch: only a segment that got past step 0 was a launch of its own.
        if not seg.empty and seg.reached > 0:
            seg = _new_segment(segments, f"restart banner at line {number}: {line.strip()[:60]}")
        if seg.start_time is None:
            seg.start_time = _stamp(line)


def _without_empty_loss(metrics: dict[str, float], interval: int | None) -> dict[str, float]:
    """The metrics of an iteration line, less a loss of exactly 0 when every iteration of the interval
    was skipped: Megatron averages the loss over the iterations it did not skip, so with none left it
    prints ``lm loss: 0.000000E+00``, which is no loss value."""
    skipped = metrics.get(SKIPPED_ITERS)
    if interval is None or skipped is None or skipped < interval:
        return metrics
    return {k: v for k, v in metrics.items() if not (is_loss(k) and v == 0.0)}


def _new_segment(segments: list[_Segment], note: str) -> _Segment:
    seg = _Segment(note)
    segments.append(seg)
    return seg


def _flush_pending(seg: _Segment, builder: RunLogBuilder, *, step: int | None = None) -> None:
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


@dataclass(frozen=True, kw_only=True)
class ProgressLine:
    """What one Megatron iteration or validation line reports.

    Attributes:
        step: the iteration the line is about.
        metrics: metric name -> value, in the metric's unit (``(ms)`` fields converted to seconds).
        text: the matched part of the line (the same text printed twice is one line, not a restart).
    """

    step: int
    metrics: dict[str, float]
    text: str


def parse_iteration(line: str) -> ProgressLine | None:
    """The step and metrics of a Megatron iteration line, or None when ``line`` is not one."""
    m = ITERATION.search(line)
    if m is None:
        return None
    metrics = {}
    for key, value in _fields(m.group(3)):
        name, scale = _metric(key)
        if name is not None:
            metrics[name] = value * scale
    return ProgressLine(step=int(m.group(1)), metrics=metrics, text=m.group(0))


def parse_validation(line: str) -> ProgressLine | None:
    """The step and ``val_*`` (or ``test_*``) metrics of a Megatron validation line, or None."""
    m = VALIDATION.search(line)
    if m is None:
        return None
    test = (m.group(2) or "validation").lower() == "test"
    metrics = {}
    for key, value in _fields(m.group(3)):
        name = _validation_metric(key, test)
        if name is not None:
            metrics[name] = value
    return ProgressLine(step=int(m.group(1)), metrics=metrics, text=m.group(0))


@dataclass(frozen=True, kw_only=True)
class Overflow:
    """One DeepSpeed fp16 overflow: a skipped step.

    Attributes:
        rank: the rank that printed it (0 when the line does not say).
        attempted: the loss scale the step was tried with.
        reduced: the scale after the overflow (half the attempted one when the line does not say).
    """

    rank: int
    attempted: float
    reduced: float


def parse_overflow(line: str) -> Overflow | None:
    """The overflow a DeepSpeed overflow line reports, or None when ``line`` is not one."""
    m = OVERFLOW.search(line)
    if m is None:
        return None
    try:
        attempted = finite_or_nan(m.group(2))
        reduced = finite_or_nan(m.group(3)) if m.group(3) else attempted / 2
    except ValueError:
        return None
    return Overflow(rank=int(m.group(1) or 0), attempted=attempted, reduced=reduced)


def overflow_event(ov: Overflow, *, step: int, line: int) -> dict[str, Any]:
    """The ``fp16_overflow`` event of one overflow, counted into ``step``."""
    return {"step": step, "event": "fp16_overflow", "rank": ov.rank, "attempted_scale": ov.attempted,
            "new_scale": ov.reduced, "line": line}


@dataclass(frozen=True, kw_only=True)
class OverflowCount:
    """The overflows of one logging interval, counted into the step that ends it.

    Attributes:
        skipped: steps skipped in the interval: the most overflows any one rank printed (every rank
            prints the same overflow).
        scale: the loss scale after them, as the lowest rank printed it.
        line: the line of that rank's last overflow.
        events: one ``fp16_overflow`` event per overflow line, every rank's.
    """

    skipped: float
    scale: float
    line: int
    events: list[dict[str, Any]]


def count_overflows(pending: Sequence[tuple[Overflow, int]], step: int) -> OverflowCount:
    """Count ``(overflow, line)`` pairs (at least one) into ``step``: Megatron's own "number of skipped
    iterations" for the interval; the Megatron and the pasted-text readers both count this way."""
    per_rank: dict[int, int] = {}
    for ov, _ in pending:
        per_rank[ov.rank] = per_rank.get(ov.rank, 0) + 1
    lowest = min(per_rank)
    last, line = [p for p in pending if p[0].rank == lowest][-1]
    return OverflowCount(skipped=float(max(per_rank.values())), scale=last.reduced, line=line,
                         events=[overflow_event(ov, step=step, line=n) for ov, n in pending])


def _fields(text: str):
    """Yield ``(key, number)`` for every ``key: number`` field of a ``|``-separated line."""
    for part in text.split("|"):
        key, sep, rest = part.partition(":")
        if not sep:  # Megatron-LM before 2020 wrote "lm loss 6.758929E+00 | loss scale 64.0 |", no colon
            key, sep, rest = part.strip().rpartition(" ")
            if not sep:
                continue
        token = rest.split(None, 1)[0] if rest and not rest.isspace() else ""
        try:
            value = float(token)  # also reads nan, inf, -inf, as PyTorch prints them
        except ValueError:
            continue
        yield key, value


@lru_cache(maxsize=1024)
def _metric(key: str) -> tuple[str | None, float]:
    """Iteration-line key -> (metric name, factor to the metric's unit)."""
    scale = 1.0
    unit = _UNIT.search(key)
    if unit is not None:
        if unit.group(1).strip().lower() == "ms":
            scale = 1e-3
        key = _UNIT.sub(" ", key)
    low = " ".join(key.lower().split())
    if not low:
        return None, scale
    if low.startswith("lm loss ") and len(low) > len("lm loss "):
        stream = low[len("lm loss "):].replace(" ", "_")
        return f"{LOSS}/{stream}", scale
    return canonical_name(low), scale


@lru_cache(maxsize=1024)
def _validation_metric(key: str, test: bool) -> str | None:
    """Validation-line key -> metric name (``val_*``, or ``test_*`` for the test set), or None."""
    low = " ".join(key.lower().split())
    prefix = "test" if test else "val"
    if low == "lm loss value":
        return "test_lm_loss" if test else VAL_LOSS
    if low == "lm loss ppl":
        return f"{prefix}_ppl"
    if low.endswith(" value"):
        return f"{prefix}_{low[:-len(' value')].replace(' ', '_')}"
    if low.endswith(" ppl"):
        return f"{prefix}_{low[:-len(' ppl')].replace(' ', '_')}_ppl"
    return None


def _stamp(line: str) -> float | None:
    m = _STAMP.search(line)
    if m is None:
        return None
    try:
        when = datetime.strptime(f"{m.group(1)} {m.group(2)}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return when.replace(tzinfo=timezone.utc).timestamp()
