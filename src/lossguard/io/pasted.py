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

import heapq
import re
from pathlib import Path

from ..errors import LogFormatError
from ..runlog import RunLog, RunLogBuilder
from . import megatron
from ._paste_lines import LineKind, parse_line
from ._paste_steps import PasteState, finish, take
from .text.lines import MAX_LINE, text_lines

NAME = "pasted"
"""Registry name of this reader."""

SNIFF_SCAN_BYTES = megatron.SCAN_BYTES
"""How far past the first 64 KiB the sniffer looks for a progress line (a paste after long start-up
output); the same bound as the Megatron reader's. A file whose first progress line comes later is
still read with ``--format pasted``."""

SNIFF_MAX_CHECKS = 10_000
"""Look-alike lines (``step 3: ...`` that is no known tool's line) checked past the head before the
sniffer gives up: with the bytes bound, this keeps a large non-log text's sniff under a second."""

_LOGGING_STEPS = re.compile(rb"logging_steps['\"]?\s*[=:]\s*(\d+)")

# Where a progress line of :mod:`._paste_lines` can start, in lower-cased bytes. Each pattern starts
# with a literal, so a block is searched at bytes.find speed (one alternation of them is ~20x slower,
# and the line-by-line parse ~100x); a hit is only a candidate, checked with ``parse_line``.
_PROGRESS_BYTES = (
    re.compile(rb"iter(?:\s+\d+\s*:|\(train\)\s*\[|ation\s+\d+)"),  # nanoGPT, mlx_lm, mmengine, Megatron
    re.compile(rb"step(?:\s+\d+\s*[:/]|:\d+/)"),  # nanoGPT eval, llm.c, modded-nanogpt
    re.compile(rb"epoch(?:\(train\))?\s*\[\s*\d+\s*\]\s*\["),  # mmengine
    re.compile(rb"'(?:loss|eval_|train_runtime)"),  # HF Trainer's printed dicts
    re.compile(rb"overflow!"),  # DeepSpeed
    re.compile(rb"already at minimum"),  # DeepSpeed
    re.compile(rb"val loss"),  # llm.c
)
_MEGATRON = "megatron"
_PASTE = "paste"


def sniff(path: Path, head: bytes) -> bool:
    """True when the text holds a progress line of a tool this reader knows, and is not a full Megatron log.

    A Megatron iteration line or DeepSpeed engine line in the first 64 KiB leaves the file to the
    Megatron reader (which also reads overflow lines); CSV and JSONL files are never claimed. Past
    the head, the first line that decides (a progress line, or a Megatron line) is looked for within
    :data:`SNIFF_SCAN_BYTES`, at most :data:`SNIFF_MAX_CHECKS` candidate lines.
    """
    from . import csv as csv_reader
    from . import jsonl

    if b"\0" in head or megatron.first_line(head, overflow=False) >= 0:
        return False
    if jsonl.sniff(path, head) or csv_reader.sniff(path, head):
        return False
    kinds = set()
    for raw in head.decode("utf-8", errors="replace").splitlines():
        hit = parse_line(raw)
        if hit is not None:
            kinds.add(hit.kind)
    if len(head) < 64 * 1024:
        if kinds and kinds <= {LineKind.OVERFLOW, LineKind.SCALE_AT_MINIMUM}:
            from . import text  # overflow lines beside loss lines of a shape this reader does not know:
            return not text.head_claims(head)  # the grammar reads both (text/overflow.py)
        return bool(kinds)
    if kinds and not kinds <= {LineKind.OVERFLOW, LineKind.SCALE_AT_MINIMUM}:
        return True
    if kinds:  # only DeepSpeed overflow lines so far: a Megatron-DeepSpeed log may start that way
        return _first_deciding_line(path, len(head), paste=False) is None
    return _first_deciding_line(path, len(head), paste=True) == _PASTE


def _first_deciding_line(path: Path, start: int, *, paste: bool) -> str | None:
    """What the first deciding line past ``start`` is: :data:`_MEGATRON`, :data:`_PASTE` (only
    looked for when ``paste``), or None when neither comes within the bounds."""
    checks = 0
    with open(path, "rb") as f:
        f.seek(max(0, start - MAX_LINE))  # a line cut at the head's end is looked at whole
        carry = b""
        end = start + SNIFF_SCAN_BYTES
        while f.tell() < end:
            block = f.read(min(1 << 20, end - f.tell()))
            if not block:
                block, carry = carry + b"\n", b""  # the last line, unterminated
                if block == b"\n":
                    return None
            data = carry + block
            cut = data.rfind(b"\n") + 1
            lines, carry = data[:cut], data[cut:][-MAX_LINE:]
            mega = megatron.first_line(lines, overflow=False)
            mega = len(lines) if mega < 0 else lines.rfind(b"\n", 0, mega) + 1  # that line's start
            if paste:
                low = lines[:mega].lower()  # ASCII-only lowering: offsets stay those of ``lines``
                hits = heapq.merge(*(((m.start() for m in p.finditer(low)) for p in _PROGRESS_BYTES)))
                done = -1
                for at in hits:
                    if at < done:
                        continue  # a second candidate on a line already checked
                    lo = lines.rfind(b"\n", 0, at) + 1
                    done = lines.find(b"\n", at) + 1
                    if parse_line(lines[lo:done].decode("utf-8", errors="replace")) is not None:
                        return _PASTE
                    checks += 1
                    if checks >= SNIFF_MAX_CHECKS:
                        return None
            if mega < len(lines):
                return _MEGATRON
    return None


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
        raise LogFormatError(f"--logging-steps (logging_steps) must be a positive whole number, got {logging_steps!r}",
                             path=path, fix="pass --logging-steps N with the TrainingArguments.logging_steps "
                                            "the training run was configured with")
    warnings: list[str] = []
    try:
        shown = logging_steps or _logging_steps_in(path)
        state = PasteState(logging_steps=shown or 1)
        for number, line in text_lines(path):
            parsed = parse_line(line)
            if parsed is not None:
                take(state, parsed, number)
    except OSError as exc:
        raise LogFormatError(f"cannot read the file: {exc.strerror or exc}", path=path,
                             fix="check the path and its permissions") from None
    if state.hf_count and shown is None:
        counted = _counted_by_grammar(path)
        if counted is not None:
            return counted
        warnings.append("HF Trainer's printed dicts carry no step: they are numbered 1, 2, 3, ... in order; "
                        "pass --logging-steps N (TrainingArguments.logging_steps) to number them as the Trainer did")
    finish(state, warnings)
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


def _counted_by_grammar(path: Path) -> RunLog | None:
    """The paste read by the text grammar when its HF dicts get their step from a counter printed in the
    same text (the tqdm bar's ``2210/4000`` above each dict, ms-swift's ``'global_step/max_steps'``),
    or None when the grammar finds no such counter (the dicts are then numbered by order)."""
    from . import text

    try:
        log = text.read(path)
    except LogFormatError:
        return None
    doc = log.metadata.get("text", {})
    if doc.get("step_rule") == "order" or "loss" not in log.series:
        return None
    log.metadata.setdefault("warnings", []).append(
        f"HF Trainer's printed dicts carry no step: each is placed at the counter '{doc.get('step') or 'N/M'}' "
        "printed before it; pass --logging-steps N to number them by TrainingArguments.logging_steps instead")
    return log


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
