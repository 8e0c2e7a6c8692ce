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
from pathlib import Path

from ..errors import LogFormatError
from ..runlog import RunLog, RunLogBuilder
from .megatron_launch import Launch, flush_pending, read_line

NAME = "megatron"
"""Registry name of this reader."""

# The lines that make a file a Megatron / DeepSpeed log, one pattern each: a pattern that starts with
# a literal is searched at bytes.find speed (an alternation, or a leading \b, is ~20x slower).
_SNIFF_ITERATION = re.compile(rb"iteration\s+\d+\s*/\s*\d+\s*\|")
_SNIFF_ENGINE = re.compile(rb"\[Rank\s+\d+\]\s+step=\d+,\s*skipped=\d+")
_SNIFF_OVERFLOW = re.compile(rb"OVERFLOW!\s*Rank\s+\d+\s+Skipping step")

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
    segments: list[Launch] = [Launch("start of file")]
    with fh:
        try:
            for number, line in enumerate(fh, 1):
                read_line(line, number, segments, builder)
        except (OSError, UnicodeError) as exc:
            raise LogFormatError(f"cannot read the file: {exc}", path=path, fix="check the file") from None
    for seg in segments:
        flush_pending(seg, builder)
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


