"""JSON-lines training logs: one JSON object per line, keys may differ from line to line.

A record with an ``"event"`` key is not a metric row: it goes to :attr:`RunLog.events` (lossguard's
guard writes its decisions this way, e.g. ``{"step": 300, "event": "rollback", "to_step": 200}``).
A ``rollback`` or ``resume`` event starts a new segment: the rows after it were logged by the
relaunched run. Values may be numbers, ``null`` (missing), ``NaN``/``Infinity`` (Python's json writes
them) or numeric strings; nested objects and lists are ignored.

pyarrow's JSON reader is used when installed (extra ``fast``); the stdlib path gives the same
result and the exact line of any bad record.
"""
from __future__ import annotations

import json
from pathlib import Path


from ..errors import LogFormatError
from ._jsonl_chunks import read_chunked
from .jsonl_records import parse_lines, records_table, split_events
from ._tail import cut_partial_last_line, with_warnings
from .csv import check_file, read_bytes
from .tabular import to_runlog

NAME = "jsonl"
"""Registry name of this reader."""


def _first_record_line(head: bytes) -> bytes | None:
    for line in head.split(b"\n")[:5]:
        line = line.strip()
        if line:
            return line
    return None


def sniff(path: Path, head: bytes) -> bool:
    """True when the first non-blank line is a complete JSON object."""
    line = _first_record_line(head)
    if not line or not line.startswith(b"{") or not line.endswith(b"}"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def read(path: Path, *, root: Path | None = None, fast: bool = True, format: str = NAME, rename=None,
         dedupe: bool = False):
    """Read one JSONL log into an unstitched RunLog (a segment per launch, events kept).

    Args:
        path: the file.
        root: unused (the directory the user named).
        fast: use pyarrow when it is installed.
        format: the name to record (the W&B reader reuses this one).
        rename: raw key -> metric name or None to drop it (default ``canonical_name``).
        dedupe: drop a point repeating the previous step and value (the W&B reader: HF repeats
            ``train/epoch`` in its eval records).

    Raises:
        LogFormatError: empty file, a line that is not a JSON object, no step key, a non-numeric
            metric value, duplicate or backward steps in one segment; the message names the line.
    """
    path = Path(path)
    check_file(path)
    warnings: list[str] = []
    limit = cut_partial_last_line(path, _is_json, warnings)

    fast_result = read_chunked(path, limit) if fast else None
    if fast_result is not None:
        table, seg, notes, events = fast_result
    else:
        data = read_bytes(path)
        records, lines = parse_lines(path, data if limit is None else data[:limit])
        del data
        rows, row_lines, seg, notes, events = split_events(records, lines)
        table = records_table(rows, row_lines)
    table.warnings[:0] = warnings
    segments = seg if len(notes) > 1 else None
    try:
        return to_runlog(table, path=path, format=format, segments=segments, segment_notes=notes, events=events,
                         rename=rename, dedupe=dedupe)
    except LogFormatError as exc:
        if table.exact_lines:  # the line named is exact: no need to read the file again
            raise with_warnings(exc, table.warnings) from None
        return read(path, root=root, fast=False, format=format, rename=rename, dedupe=dedupe)


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line)
        return True
    except (ValueError, RecursionError):
        return False
