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
from typing import Any

import numpy as np

from ..errors import LogFormatError
from ._columns import store_cells, store_numeric
from ._table import Table, gather_columns, to_runlog
from ._tail import cut_partial_last_line, with_warnings
from .csv import check_file, read_bytes

NAME = "jsonl"
EVENT_KEY = "event"
SEGMENT_EVENTS = ("rollback", "resume")
"""Events after which the rows belong to a new segment (a relaunch of the run)."""


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


def _cell(v: Any) -> str:
    if v is None or isinstance(v, (dict, list)):
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def records_table(records: list[dict], lines: list[int], *, unit: str = "line") -> Table:
    """Columns of metric records (stdlib path): numbers to float64, strings parsed, nesting dropped.

    One pass over the cells present (not rows x keys): a key that one record in a thousand has is
    stored sparse, and past ``MAX_COLUMNS`` distinct keys the new ones are dropped with a warning
    (:func:`lossguard.io._table.gather_columns`, shared with the chunked reader).
    """
    n = len(records)
    warnings: list[str] = []
    cols = gather_columns(records, warnings)
    table = Table(names=[], lines=np.asarray(lines, dtype=np.int64), unit=unit, warnings=warnings)
    for k, (idx, vals) in cols.items():
        if all(type(v) in (int, float) for v in vals):
            try:
                store_numeric(table, k, np.asarray(idx, dtype=np.int64), np.array(vals, dtype=np.float64), n)
                table.names.append(k)
                continue
            except OverflowError:
                pass  # an integer past float64: read as text below ("1e400" -> inf, as a CSV cell)
        store_cells(table, k, np.asarray(idx, dtype=np.int64), [_cell(v) for v in vals], n)
        table.names.append(k)
    return table


def split_events(records: list[dict], lines: list[int]
                 ) -> tuple[list[dict], list[int], np.ndarray, list[str], list[dict]]:
    """Separate event records; number segments, a new one after every rollback/resume event.

    Returns:
        metric records, their lines, their segment numbers, a note per segment, the events.
    """
    rows, row_lines, seg, notes, events = [], [], [], [""], []
    current = 0
    for r, line in zip(records, lines, strict=True):
        if r.get(EVENT_KEY) is not None:
            events.append(r)
            if starts_segment(r):
                current += 1
                notes.append(_note(r))
            continue
        rows.append(r)
        row_lines.append(line)
        seg.append(current)
    return rows, row_lines, np.asarray(seg, dtype=np.int64), notes, events


def _lines(data: bytes | bytearray, end: int):
    """The lines of ``data[:end]``, one copy each (not a split list of the whole block at once)."""
    start = 0
    while start <= end:
        stop = data.find(b"\n", start, end)
        if stop < 0:
            stop = end
        yield data[start:stop]
        start = stop + 1


def parse_lines(path: Path, data: bytes | bytearray, *, first_line: int = 1,
                end: int | None = None) -> tuple[list[dict], list[int]]:
    """Every non-blank line parsed as a JSON object, with its 1-based line number.

    Args:
        path: the file, named in errors.
        data: its bytes (or a chunk of whole lines of it).
        first_line: the line number of ``data``'s first line.
        end: read only ``data[:end]`` (a chunk inside a larger reused buffer).
    """
    records, lines = [], []
    for i, raw in enumerate(_lines(data, len(data) if end is None else end), start=first_line):
        raw = raw.strip()
        if not raw:
            continue
        try:
            rec = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise LogFormatError(f"not valid JSON ({exc})", path=str(path), where=f"line {i}",
                                 fix="each line must be one complete JSON object; remove the truncated line") from None
        if not isinstance(rec, dict):
            raise LogFormatError(f"a JSON {type(rec).__name__} where a record object was expected", path=str(path),
                                 where=f"line {i}", fix='each line must be a JSON object like {"step": 1, "loss": 2.3}')
        records.append(rec)
        lines.append(i)
    return records, lines


def starts_segment(rec: dict) -> bool:
    """True for an event after which the rows were logged by a new launch (a rollback or resume).

    A guard in shadow mode logs the rollback it *would* have made (``"shadow": true``); the run went
    on, so that record starts nothing.
    """
    return str(rec.get(EVENT_KEY)).lower() in SEGMENT_EVENTS and not rec.get("shadow")


def _note(rec: dict) -> str:
    return f"{rec.get(EVENT_KEY)} event at step {rec.get('step', '?')}"


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
    from ._jsonl_chunks import read_chunked  # (imports this module: loaded on first use)

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
