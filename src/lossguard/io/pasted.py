"""Training output as people paste it: terminal captures and issue-thread fragments.

Recognised by content anywhere in the file (see :mod:`lossguard.io._paste_lines` for the tools and
their lines); tqdm redraws, markdown quoting and every other line are ignored. Full Megatron-LM /
Megatron-DeepSpeed stdout logs stay with :mod:`lossguard.io.megatron`; this reader takes the files
where the lines below are the training progress.

How steps are found:

* Lines that print their step (nanoGPT, llm.c, modded-nanogpt, mlx_lm, mmengine, Megatron) use it; a
  step lower than the previous one starts a new segment (a restart pasted after the first run).
* HF Trainer's printed dicts carry no step: the k-th training dict is step ``k * logging_steps``
  (``logging_steps`` from :func:`read`'s argument, else from a ``logging_steps=N`` the paste
  itself shows, else 1, with a warning). ``epoch`` is kept as a metric. An eval dict belongs to
  the training step before it. An epoch going backwards starts a new segment, placed at the step
  the epoch implies.
* DeepSpeed overflow lines carry no step either: they are counted into the next logged step
  (``skipped_iters``, and ``loss_scale`` = the reduced scale), as the Megatron reader does. A paste
  of overflow lines and nothing else numbers them by order (1, 2, ...), so the loss-scale collapse
  is still a metric.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LogFormatError
from ..metrics import LOSS_SCALE, SKIPPED_ITERS
from ..runlog import RunLog, RunLogBuilder
from ._paste_lines import CANDIDATE_BYTES, LineKind, PastedLine, parse_line
from ._text_lines import MAX_LINE, text_lines

NAME = "pasted"
"""Registry name of this reader."""

SNIFF_SCAN_BYTES = 256 << 20
"""How far past the first 64 KiB the sniffer looks for a progress line (a paste after long start-up output)."""

_LOGGING_STEPS = re.compile(rb"logging_steps['\"]?\s*[=:]\s*(\d+)")
_MEGATRON_ONLY = re.compile(r"\biteration\s+\d+\s*/\s*\d+\s*\||\[Rank\s+\d+\]\s+step=\d+,\s*skipped=\d+")


def sniff(path: Path, head: bytes) -> bool:
    """True when the text holds a progress line of a tool this reader knows, and is not a full Megatron log.

    A Megatron iteration line or DeepSpeed engine line in the first 64 KiB leaves the file to the
    Megatron reader (which also reads overflow lines); CSV and JSONL files are never claimed.
    """
    from . import csv as csv_reader
    from . import jsonl

    if b"\0" in head or jsonl.sniff(path, head) or csv_reader.sniff(path, head):
        return False
    text = head.decode("utf-8", errors="replace")
    found = False
    for raw in text.splitlines():
        if _MEGATRON_ONLY.search(raw):
            from . import megatron
            return not megatron.sniff(path, head)  # ours only if the Megatron reader declines it
        found = found or parse_line(raw) is not None
    if found or len(head) < 64 * 1024:
        return found
    return _scan_rest(path, len(head))


def _scan_rest(path: Path, start: int) -> bool:
    """Look past the head, block by block, for the first progress line (bounded by :data:`SNIFF_SCAN_BYTES`)."""
    with open(path, "rb") as f:
        f.seek(max(0, start - MAX_LINE))
        carry = b""
        while f.tell() < start + SNIFF_SCAN_BYTES:
            block = f.read(1 << 20)
            if not block:
                return False
            data = carry + block
            cut = data.rfind(b"\n") + 1
            lines, carry = data[:cut], data[cut:][-MAX_LINE:]
            for m in CANDIDATE_BYTES.finditer(lines):
                lo = lines.rfind(b"\n", 0, m.start()) + 1
                hi = lines.find(b"\n", m.start())
                line = lines[lo:hi].decode("utf-8", errors="replace")
                if _MEGATRON_ONLY.search(line):
                    return False
                if parse_line(line) is not None:
                    return True
    return False


@dataclass
class _Segment:
    """Points of one launch: metric -> step -> (value, line)."""

    note: str
    points: dict[str, dict[int, tuple[float, int]]] = field(default_factory=dict)
    last_step: int | None = None

    def put(self, metric: str, step: int, value: float, line: int) -> None:
        self.points.setdefault(metric, {})[step] = (value, line)


@dataclass
class _State:
    """Everything carried from one line to the next while reading."""

    logging_steps: int
    segments: list[_Segment] = field(default_factory=lambda: [_Segment("start of paste")])
    hf_count: int = 0
    hf_epoch: float | None = None
    pending: list[tuple[PastedLine, int]] = field(default_factory=list)  # overflows waiting for a step
    overflows: list[tuple[PastedLine, int]] = field(default_factory=list)  # every overflow, for a stepless paste
    events: list[dict] = field(default_factory=list)
    tools: dict[str, None] = field(default_factory=dict)

    @property
    def seg(self) -> _Segment:
        return self.segments[-1]

    def restart(self, note: str) -> _Segment:
        self.segments.append(_Segment(note))
        return self.seg


def read(path: Path, *, root: Path | None = None, logging_steps: int | None = None) -> RunLog:
    """Read pasted or captured training output as an unstitched RunLog.

    Args:
        path: the text file (``lossguard analyze -`` spools stdin into one).
        root: unused (the directory the user named).
        logging_steps: HF Trainer's ``logging_steps``, to number its printed dicts as Trainer did.

    Raises:
        LogFormatError: the file is unreadable, or holds no progress line of a known tool.
    """
    path = Path(path)
    if logging_steps is not None and (not isinstance(logging_steps, int) or logging_steps < 1):
        raise LogFormatError(f"logging_steps must be a positive integer, got {logging_steps!r}", path=path,
                             fix="pass the logging_steps the training run was configured with")
    warnings: list[str] = []
    try:
        shown = logging_steps or _logging_steps_in(path)
        state = _State(logging_steps=shown or 1)
        for number, line in text_lines(path):
            parsed = parse_line(line)
            if parsed is not None:
                _take(state, parsed, number)
    except OSError as exc:
        raise LogFormatError(f"cannot read the file: {exc.strerror or exc}", path=path,
                             fix="check the path and its permissions") from None
    if state.hf_count and shown is None:
        warnings.append("HF Trainer's printed dicts carry no step: they are numbered 1, 2, 3, ... in order; "
                        "pass logging_steps to number them as the Trainer did")
    _finish(state, warnings)
    if not any(seg.points for seg in state.segments):
        raise LogFormatError(
            "no training progress line found (HF Trainer dicts, nanoGPT/llm.c/mlx_lm/mmengine/Megatron "
            "step lines, DeepSpeed overflow lines)", path=path,
            fix="paste the lines the training loop printed, e.g. \"{'loss': 2.63, 'epoch': 0.07}\" or "
                "'iter 100: loss 2.31, time 95ms'")
    builder = RunLogBuilder(NAME, unit="line")
    for seg in state.segments:
        if not seg.points:
            continue
        index = builder.start_segment(str(path), note=seg.note)
        for metric, table in seg.points.items():
            steps = sorted(table)
            builder.add(metric, steps, [table[s][0] for s in steps], where=[table[s][1] for s in steps],
                        segment=index)
    for event in state.events:
        builder.add_event(event)
    builder.metadata["tools"] = list(state.tools)
    if state.hf_count:
        builder.metadata["logging_steps"] = state.logging_steps
    if warnings:
        builder.metadata["warnings"] = warnings
    return builder.build()


def _logging_steps_in(path: Path) -> int | None:
    """A ``logging_steps=N`` the paste itself shows (HF prints its TrainingArguments), or None."""
    with open(path, "rb") as f:
        carry = b""
        while block := f.read(1 << 20):
            m = _LOGGING_STEPS.search(carry + block)
            if m is not None and int(m.group(1)) > 0:
                return int(m.group(1))
            carry = block[-64:]
    return None


def _take(state: _State, parsed: PastedLine, number: int) -> None:
    state.tools.setdefault(parsed.tool, None)
    kind = parsed.kind
    if kind is LineKind.OVERFLOW:
        state.pending.append((parsed, number))
        state.overflows.append((parsed, number))
        return
    if kind is LineKind.SCALE_AT_MINIMUM:
        step = state.seg.last_step
        state.events.append({"step": 0 if step is None else step, "event": "loss_scale_at_minimum", "line": number})
        return
    if kind is LineKind.HF_SUMMARY:
        return
    if kind is LineKind.HF_TRAIN:
        step = _hf_step(state, parsed, number)
    elif kind in (LineKind.HF_EVAL, LineKind.UNSTEPPED):
        step = state.seg.last_step if state.seg.last_step is not None else 0
    else:
        step = parsed.step
        last = state.seg.last_step
        if last is not None and step < last:
            state.restart(f"step {step} after {last} at line {number}")
    seg = state.seg
    seg.last_step = step if seg.last_step is None else max(seg.last_step, step)
    _flush(state, step)
    for name, value in parsed.metrics.items():
        seg.put(name, step, value, number)


def _hf_step(state: _State, parsed: PastedLine, number: int) -> int:
    """The step of the next HF training dict: its order times logging_steps (or where its epoch puts it)."""
    epoch = parsed.metrics.get("epoch")
    if epoch is not None and state.hf_epoch is not None and epoch < state.hf_epoch and state.hf_count:
        # A resumed run printing from an earlier epoch: place it where that epoch was (the run's pace so far).
        per_dict = state.hf_epoch / state.hf_count
        state.hf_count = max(0, round(epoch / per_dict) - 1) if per_dict > 0 else 0
        state.restart(f"epoch {epoch:g} after {state.hf_epoch:g} at line {number}")
    if epoch is not None:
        state.hf_epoch = epoch
    state.hf_count += 1
    return state.hf_count * state.logging_steps


def _flush(state: _State, step: int) -> None:
    """Count the overflows since the last logged step into ``step`` (the interval they happened in)."""
    if not state.pending:
        return
    per_rank: dict[int, int] = {}
    for parsed, number in state.pending:
        per_rank[parsed.rank] = per_rank.get(parsed.rank, 0) + 1
        state.events.append({"step": step, "event": "fp16_overflow", "rank": parsed.rank,
                             "new_scale": parsed.metrics[LOSS_SCALE], "line": number})
    lowest = min(per_rank)
    parsed, number = [p for p in state.pending if p[0].rank == lowest][-1]
    state.seg.put(SKIPPED_ITERS, step, float(max(per_rank.values())), number)
    state.seg.put(LOSS_SCALE, step, parsed.metrics[LOSS_SCALE], number)
    state.pending = []


def _finish(state: _State, warnings: list[str]) -> None:
    """Place overflows still pending: after the last step, or, in a paste without steps, by order."""
    if not state.pending:
        return
    if any(seg.last_step is not None for seg in state.segments):
        last = state.seg.last_step
        _flush(state, (last if last is not None else 0) + 1)  # the step in progress when the paste ends
        return
    lowest = min(p.rank for p, _ in state.overflows)
    order = [(p, n) for p, n in state.overflows if p.rank == lowest]
    for k, (parsed, number) in enumerate(order, start=1):
        state.seg.put(LOSS_SCALE, k, parsed.metrics[LOSS_SCALE], number)
        state.seg.put(SKIPPED_ITERS, k, 1.0, number)
        state.events.append({"step": k, "event": "fp16_overflow", "rank": parsed.rank,
                             "new_scale": parsed.metrics[LOSS_SCALE], "line": number})
    for event in state.events:  # a give-up line numbered against the overflows it followed
        if event["event"] == "loss_scale_at_minimum":
            event["step"] = sum(1 for _, n in order if n < event["line"]) + 1
    state.pending = []
    warnings.append("the paste has DeepSpeed overflow lines but no step numbers: each overflow is numbered "
                    "by order (1, 2, 3, ...), one skipped step each")
