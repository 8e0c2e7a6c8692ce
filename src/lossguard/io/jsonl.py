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
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import LogFormatError
from ._chunks import Piece, chunks, join_pieces
from ._table import MAX_COLUMNS, Table, add_text_columns, limit_columns, to_runlog
from ._tail import cut_partial_last_line
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
    """Columns of metric records (stdlib path): numbers to float64, strings parsed, nesting dropped."""
    names: dict[str, None] = {}
    for r in records:
        for k in r:
            names.setdefault(k, None)
    warnings: list[str] = []
    table = Table(names=limit_columns(list(names), warnings), lines=np.asarray(lines, dtype=np.int64), unit=unit,
                  warnings=warnings)
    names = dict.fromkeys(table.names)
    n = len(records)
    text: dict[str, list[str]] = {}
    for k in names:
        col = [r.get(k) for r in records]
        if all(v is None or (type(v) in (int, float)) for v in col):
            present = np.fromiter((v is not None for v in col), dtype=bool, count=n)
            values = np.fromiter((math.nan if v is None else float(v) for v in col), dtype=np.float64, count=n)
            table.numeric[k], table.present[k] = values, present
        elif all(v is None or isinstance(v, (dict, list)) for v in col):
            continue  # nested values (histograms, tables): not metrics
        else:
            text[k] = [_cell(v) for v in col]
    table.names = [k for k in table.names if k in table.numeric or k in text]
    add_text_columns(table, text)
    return table


def split_events(records: list[dict], lines: list[int]) -> tuple[list[dict], list[int], np.ndarray, list[str], list[dict]]:
    """Separate event records; number segments, a new one after every rollback/resume event.

    Returns:
        metric records, their lines, their segment numbers, a note per segment, the events.
    """
    rows, row_lines, seg, notes, events = [], [], [], [""], []
    current = 0
    for r, line in zip(records, lines):
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


def parse_lines(path: Path, data: bytes, *, first_line: int = 1) -> tuple[list[dict], list[int]]:
    """Every non-blank line parsed as a JSON object, with its 1-based line number.

    Args:
        path: the file, named in errors.
        data: its bytes (or a chunk of whole lines of it).
        first_line: the line number of ``data``'s first line.
    """
    records, lines = [], []
    for i, raw in enumerate(data.split(b"\n"), start=first_line):
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


def _read_arrow(path: Path, limit: int | None):
    """pyarrow fast path: (table, segments, notes, events), or None to use the exact path.

    Raises:
        LogFormatError: a line that is not a JSON object, at its exact line, found by re-reading
            only the chunk pyarrow rejected.
    """
    try:
        return _arrow_table(path, limit)
    except LogFormatError:
        raise
    except Exception:  # noqa: BLE001 - pyarrow rejects odd bytes in many ways; the exact path explains them
        return None


def _arrow_table(path: Path, limit: int | None):
    import pyarrow as pa
    import pyarrow.json as pajson

    from .csv import arrow_column

    # Parsed in chunks of whole lines so that peak memory stays near the output arrays. A chunk whose
    # records are its lines one to one has exact line numbers; otherwise (blank lines) record i is
    # taken to be on line i + 1 and an error is re-derived on the exact path.
    pieces: list[Piece] = []
    names: dict[str, None] = {}
    events: list[tuple[int, dict]] = []
    kept_rows: list[np.ndarray] = []
    row0 = 0
    for chunk in chunks(path, skip_first_line=False, limit=limit):
        try:
            t = pajson.read_json(pa.BufferReader(chunk.data),
                                 read_options=pajson.ReadOptions(block_size=max(1 << 20, len(chunk.data) + 1)))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            # Name the bad line from this chunk alone (a bad record late in a big file costs one chunk).
            parse_lines(path, bytes(chunk.data), first_line=chunk.first_line)
            return None  # every line is JSON: pyarrow disliked something else; the exact path reads it
        n = t.num_rows
        if len(names) + t.num_columns > MAX_COLUMNS and len(set(names) | set(t.column_names)) > MAX_COLUMNS:
            return None  # the exact path keeps MAX_COLUMNS of them, with a warning
        lines = chunk.row_lines(n)
        keep = None
        if EVENT_KEY in t.column_names:
            is_event = t.column(EVENT_KEY).is_valid().to_numpy(zero_copy_only=False)
            if is_event.any():
                idx = np.flatnonzero(is_event)
                for i, rec in zip(idx.tolist(), t.take(pa.array(idx)).to_pylist()):
                    events.append((row0 + i, {k: v for k, v in rec.items() if v is not None}))
                keep = ~is_event
                t = t.filter(pa.array(keep))
            t = t.drop_columns([EVENT_KEY])
        rows = np.arange(row0, row0 + n, dtype=np.int64)
        kept_rows.append(rows if keep is None else rows[keep])
        piece = Piece(rows=t.num_rows, lines=None if lines is None else (lines if keep is None else lines[keep]))
        for name, col in zip(t.column_names, t.columns):
            typ = col.type
            parsed = arrow_column(col, pa)
            if parsed is not None:
                piece.numeric[name], piece.present[name] = parsed
            elif pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_boolean(typ):
                piece.text[name] = [_cell(v) for v in col.to_pylist()]
            elif pa.types.is_nested(typ):
                continue
            else:
                return None
            names.setdefault(name, None)
        del t
        pieces.append(piece)
        row0 += n
    rows = np.concatenate(kept_rows) if kept_rows else np.zeros(0, dtype=np.int64)
    table = join_pieces(pieces, list(names), Table(names=[], lines=rows + 1, exact_lines=False))
    notes = [""]
    boundaries = []
    for i, rec in events:
        if starts_segment(rec):
            boundaries.append(i)
            notes.append(_note(rec))
    seg = np.searchsorted(np.asarray(boundaries, dtype=np.int64), rows) if boundaries else None
    return table, seg, notes, [rec for _, rec in events]


def starts_segment(rec: dict) -> bool:
    """True for an event after which the rows were logged by a new launch (a rollback or resume).

    A guard in shadow mode logs the rollback it *would* have made (``"shadow": true``); the run went
    on, so that record starts nothing.
    """
    return str(rec.get(EVENT_KEY)).lower() in SEGMENT_EVENTS and not rec.get("shadow")


def _note(rec: dict) -> str:
    return f"{rec.get(EVENT_KEY)} event at step {rec.get('step', '?')}"


def read(path: Path, *, root: Path | None = None, fast: bool = True, format: str = NAME, rename=None):
    """Read one JSONL log into an unstitched RunLog (a segment per launch, events kept).

    Args:
        path: the file.
        root: unused (the directory the user named).
        fast: use pyarrow when it is installed.
        format: the name to record (the W&B reader reuses this one).
        rename: raw key -> metric name or None to drop it (default ``canonical_name``).

    Raises:
        LogFormatError: empty file, a line that is not a JSON object, no step key, a non-numeric
            metric value, duplicate or backward steps in one segment; the message names the line.
    """
    path = Path(path)
    check_file(path)
    warnings: list[str] = []
    limit = cut_partial_last_line(path, _is_json, warnings)
    fast_result = _read_arrow(path, limit) if fast else None
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
                         rename=rename)
    except LogFormatError:
        if table.exact_lines:
            raise  # the line named is exact: no need to read the file again
        return read(path, root=root, fast=False, format=format, rename=rename)


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line)
        return True
    except (ValueError, RecursionError):
        return False
