"""JSON-lines records: the lines parsed, event records separated, metric records made a table.

Shared by the JSONL reader's exact path (:mod:`lossguard.io.jsonl`), its chunked fast path
(:mod:`lossguard.io._jsonl_chunks`), ``lossguard watch`` (the new lines of a growing JSONL log) and
the readers of other JSON records (W&B history, HF ``trainer_state.json``), so every one parses a
line, tells an event from a metric row and starts a segment the same way.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..errors import LogFormatError
from ._columns import store_cells, store_numeric
from ._table import Table, gather_columns

EVENT_KEY = "event"
"""The key that makes a record an event (a rollback, a resume, a guard decision), not a metric row."""
SEGMENT_EVENTS = ("rollback", "resume")
"""Events after which the rows belong to a new segment (a relaunch of the run)."""


def cell_text(v: Any) -> str:
    """A JSON value as a table cell's text (nesting and null as empty, booleans as true/false)."""
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
        store_cells(table, k, np.asarray(idx, dtype=np.int64), [cell_text(v) for v in vals], n)
        table.names.append(k)
    return table


def split_events(records: list[dict],
                 lines: list[int]) -> tuple[list[dict], list[int], np.ndarray, list[str], list[dict]]:
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
                notes.append(segment_note(r))
            continue
        rows.append(r)
        row_lines.append(line)
        seg.append(current)
    return rows, row_lines, np.asarray(seg, dtype=np.int64), notes, events


def _lines(data: bytes | bytearray, end: int) -> Iterator[bytes | bytearray]:
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


def segment_note(rec: dict) -> str:
    """The note of the segment an event record starts."""
    return f"{rec.get(EVENT_KEY)} event at step {rec.get('step', '?')}"
