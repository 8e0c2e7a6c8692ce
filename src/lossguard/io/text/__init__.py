"""Any text training log: one grammar instead of a list of known line shapes.

The reader (``--format text``) takes console output and pastes that no specific reader claims:

1. :mod:`.normalise` strips what terminals and loggers add (ANSI colours, quoting, timestamps,
   logger and rank prefixes); ``\\r`` redraws are split into lines;
2. :mod:`.template` masks each line's numbers into a template and labels every number in the usual
   spellings (``k: v``, ``k=v``, ``k v``, ``| k v |``, ``'k': v``, ``k=tensor(v)``, ``N/M``);
3. :mod:`.records` glues records spread over lines (a ``[step=N/M]`` header, indented metrics; a
   bracket left open, with :mod:`.join`, which also reads an array as its mean), names the columns
   of a table header, and gathers the rows of each template in a table;
4. :mod:`.choose` picks the step (global step > iteration > epoch x batch > order) and the loss
   (ranked names; a template must repeat; :mod:`.guess` when no label names one), saying what else
   was there; ``step_key`` / ``loss_key`` override it;
5. :mod:`.build` turns the rows into points: restarts become segments (a return to the first step
   that retraces the run before is a new run, read after it), a crash line naming a NaN becomes a
   non-finite loss.

What was read and chosen is kept in ``metadata["text"]`` (shown by ``lossguard info --explain``).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from ...errors import LogFormatError
from ...runlog import RunLog, RunLogBuilder
from .build import build
from .fast import scan_file
from .choose import Choice, only_value, choose, loss_candidates
from .names import is_ppl, loss_rank
from .records import Scan, iter_decoded, scan_lines

NAME = "text"
"""Registry name of this reader."""

SNIFF_MAX_LINES = 4000
"""Lines of the head looked at by :func:`sniff` (a 100 MB text is recognised, or not, in the head)."""
SAMPLE_BYTES = 64 * 1024
"""Bytes read at each of :data:`SAMPLES` places past the head when the head is start-up output."""
SAMPLES = 8
"""Places sampled past the head (the first just after it, the rest spread over the file)."""


_TRAINING_WORDS = re.compile(rb"(?i)\b(?:loss|step|iter|iteration|epoch)\b")


def _claims(scan: Scan) -> bool:
    """A loss-like label on a template that repeats, on lines that carry a counter or repeat often."""
    for t in scan.tables:
        if t.rows >= 2 and any(k is None and (loss_rank(lab) is not None or is_ppl(lab))
                               for lab, k in zip(t.labels, t.kinds, strict=True)):
            if any(k is not None for k in t.kinds) or t.rows >= 5:
                return True
    return only_value(scan.tables, bare=True) is not None


def head_claims(head: bytes) -> bool:
    """True when the first :data:`SNIFF_MAX_LINES` lines of ``head`` hold a repeating loss line."""
    return b"\0" not in head[:4096] and _claims(scan_lines(_limited(iter_decoded(head), SNIFF_MAX_LINES)))


def sniff(path: Path, head: bytes) -> bool:
    """True when the head (or, after long start-up output, a sample further on) holds a repeating loss line."""
    if b"\0" in head[:4096]:
        return False
    if head_claims(head):
        return True
    if len(head) < 64 * 1024 or _TRAINING_WORDS.search(head) is None:
        return False  # a long text whose head never names a loss, step, iteration or epoch is no log
    return any(_claims(scan_lines(iter_decoded(block))) for block in _samples(Path(path), len(head)))


def _limited(lines, n: int):
    for k, item in enumerate(lines):
        if k >= n:
            return
        yield item


def _samples(path: Path, start: int):
    """Blocks of whole lines past the head: just after it, then spread evenly over the file."""
    try:
        size = os.path.getsize(path)
        if not Path(path).is_file():
            return
        with open(path, "rb") as f:
            places = [start] + [start + (size - start) * k // SAMPLES for k in range(1, SAMPLES)]
            for at in sorted(set(places)):
                f.seek(at)
                block = f.read(SAMPLE_BYTES)
                first, last = block.find(b"\n"), block.rfind(b"\n")
                if first < 0 or last <= first:
                    continue
                yield block[first + 1:last]
    except OSError:
        return


def read(path: Path, *, root: Path | None = None, step_key: str | None = None,
         loss_key: str | None = None) -> RunLog:
    """Read a text log through the grammar.

    Args:
        path: the text file.
        root: unused (the directory the user named).
        step_key: the label of the step counter (``"order"`` numbers the loss lines; ``"epoch*batch"``
            combines two counters), instead of the best counter.
        loss_key: the label of the loss, instead of the best-ranked loss name.

    Raises:
        LogFormatError: unreadable file, or no repeating line with a loss (the message names the
            most frequent numeric line and the flag that would read it).
    """
    path = Path(path)
    try:
        scan = scan_file(path)
    except OSError as exc:
        raise LogFormatError(f"cannot read the file: {exc.strerror or exc}", path=path,
                             fix="check the path and its permissions") from None
    choice = choose(scan.tables, loss_key=loss_key, step_key=step_key)
    if choice is None:
        raise unreadable(scan, path, loss_key=loss_key)
    if not choice.tables:
        raise LogFormatError(f"no line with '{choice.loss}' carries the step counter '{'*'.join(choice.step)}'",
                             path=path, fix="pass --step-key with a counter printed on the loss lines "
                                            "(see lossguard info --explain), or --step-key order")
    points = build(scan, choice)
    builder = RunLogBuilder(NAME, unit="line")
    for note in points.notes:
        builder.start_segment(str(path), note=note)
    for name, (seg, step, val, line) in points.metrics.items():
        if len(points.notes) == 1:  # one segment: the arrays as they are (no masked copies of 1M rows)
            builder.add(name, step, val, where=line, segment=0)
            continue
        for s in range(len(points.notes)):
            m = seg == s
            if m.any():
                builder.add(name, step[m], val[m], where=line[m], segment=s)
    for event in points.events:
        builder.add_event(event)
    builder.metadata["text"] = explain_doc(scan, choice)
    warnings = choice.warnings + points.warnings
    if scan.vectors:
        warnings.append(f"{scan.vectors} value(s) printed as arrays of numbers are read as their mean "
                        "(non-finite when any element is)")
    if warnings:
        builder.metadata["warnings"] = warnings
    return builder.build()


def explain_doc(scan: Scan, choice: Choice) -> dict:
    """What ``--explain`` shows: the templates read, their columns, the choice and its alternatives."""
    used = {t.index for t in choice.tables}
    tables = sorted(scan.tables, key=lambda t: -t.rows)[:12]
    return {
        "loss": choice.loss + (" (log of the perplexity)" if choice.ppl else ""),
        "step": "*".join(choice.step) if choice.step else "order",
        "step_rule": choice.rule.value,
        "other_losses": choice.other_losses,
        "other_steps": choice.other_steps,
        "templates": [{"example": t.example, "rows": t.rows, "read": t.index in used,
                       "columns": [lab + (f" [{k.name.lower()}]" if k is not None else "")
                                   for lab, k in zip(t.labels, t.kinds, strict=True) if lab or k is not None]}
                      for t in tables],
        "lines": scan.lines,
        "numeric_lines": scan.numeric_lines,
    }


def unreadable(scan: Scan, path: Path, *, loss_key: str | None = None) -> LogFormatError:
    """The error for a text with no readable series: its most frequent numeric line, and the flag."""
    if loss_key is not None:
        labels = sorted({lab for t in scan.tables for lab in t.labels if lab}, key=str.lower)[:20]
        return LogFormatError(f"no line prints a value labelled '{loss_key}'", path=path,
                              fix=f"labels seen: {', '.join(labels) or 'none'}")
    if not scan.tables:
        return LogFormatError("no line of this text holds a labelled number: it is not a training log", path=path,
                              fix="point lossguard at the training log (or its CSV/JSONL/TensorBoard files)")
    common = max(scan.tables, key=lambda t: t.rows)
    from .choose import integral_increasing

    labels = [lab for j, (lab, k) in enumerate(zip(common.labels, common.kinds, strict=True))
              if lab and k is None and not integral_increasing(common.column(j))]
    flag = f"--loss-key '{labels[0]}'" if labels else "--loss-key LABEL"
    return LogFormatError(
        f"no training loss found; the most frequent numeric line ({common.rows} times) is: {common.example[:160]!r}",
        path=path, fix=f"if one of its numbers is the loss, name it: {flag} "
                       f"(labels: {', '.join(labels[:8]) or 'none'}); "
                       "lossguard info --explain shows every template read")


def explain_unreadable(path: Path) -> LogFormatError | None:
    """For a named text file no reader recognised: the error naming its most frequent numeric line."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except OSError:
        return None
    if b"\0" in head[:4096]:
        return None
    scan = scan_lines(_limited(iter_decoded(head), 20_000))
    if not scan.tables or max(t.rows for t in scan.tables) < 2:
        return None
    return unreadable(scan, path)


__all__ = ["NAME", "head_claims", "sniff", "read", "explain_doc", "explain_unreadable", "loss_candidates"]
