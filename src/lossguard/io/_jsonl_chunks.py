"""The JSONL fast path: a file read in chunks of whole lines, each parsed by pyarrow or the stdlib.

pyarrow parses ordinary chunks; a chunk it cannot take (a line over :data:`WIDE_LINE`, a key that
changes type, a line that is not JSON) is parsed with the stdlib ``json`` instead, so one odd record
costs one chunk, not a re-read of the whole file, and a bad line is named from its chunk alone.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import LogFormatError
from ._chunks import Piece, chunks, join_pieces, text_cells
from ._table import MAX_COLUMNS, Table, gather_columns
from .jsonl_records import EVENT_KEY, cell_text, parse_lines, segment_note, starts_segment


def read_chunked(path: Path, limit: int | None):
    """Chunked fast path: (table, segments, notes, events), or None to use the exact path.

    Chunks are parsed by pyarrow, or by the stdlib where pyarrow cannot (very wide lines, a key
    changing type), so one odd record does not send the whole file down the slow path.

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


WIDE_LINE = 256 * 1024
"""A chunk with a line longer than this is parsed with the stdlib: pyarrow's JSON reader slows down
more than linearly with the number of keys (200,000 keys: 9 s, json.loads: 0.5 s)."""


def _arrow_table(path: Path, limit: int | None):
    import pyarrow as pa

    # Parsed in chunks of whole lines so that peak memory stays near the output arrays. A chunk whose
    # records are its lines one to one has exact line numbers; otherwise (blank lines) record i is
    # taken to be on line i + 1 and an error is re-derived on the exact path.
    pieces: list[Piece] = []
    names: dict[str, None] = {}
    events: list[tuple[int, dict]] = []
    kept_rows: list[np.ndarray] = []
    warnings: list[str] = []
    row0 = 0
    for chunk in chunks(path, skip_first_line=False, limit=limit):
        got = None
        if not _has_wide_line(chunk.data):
            try:
                got = _arrow_piece(chunk, row0, pa)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass  # not one JSON object per line, or a key changing type: the stdlib reads this chunk
        if got is None:
            got = _exact_piece(path, chunk, row0, warnings)
        piece, rows, chunk_events, n = got
        names.update(dict.fromkeys((*piece.numeric, *piece.sparse, *piece.text)))
        if len(names) > MAX_COLUMNS:
            return None  # the exact path keeps MAX_COLUMNS of them, with a warning
        events.extend(chunk_events)
        kept_rows.append(rows)
        pieces.append(piece)
        row0 += n
    rows = np.concatenate(kept_rows) if kept_rows else np.zeros(0, dtype=np.int64)
    exact = all(p.lines is not None for p in pieces)  # then join_pieces fills the exact lines
    table = join_pieces(pieces, list(names), Table(names=[], lines=np.zeros(0, dtype=np.int64) if exact else rows + 1,
                                                     exact_lines=False, warnings=warnings))
    notes = [""]
    boundaries = []
    for i, rec in events:
        if starts_segment(rec):
            boundaries.append(i)
            notes.append(segment_note(rec))
    seg = np.searchsorted(np.asarray(boundaries, dtype=np.int64), rows) if boundaries else None
    return table, seg, notes, [rec for _, rec in events]


def _has_wide_line(data: memoryview) -> bool:
    if len(data) <= WIDE_LINE:
        return False
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)  # transient: freed before parsing
    bounds = np.concatenate([[-1], ends, [len(data)]])
    return bool(np.diff(bounds).max() > WIDE_LINE + 1)


def _arrow_piece(chunk, row0: int, pa):
    """(piece, row numbers kept, events, rows in chunk) from pyarrow; None when a column type needs the stdlib."""
    import pyarrow.json as pajson

    from ._csv_arrow import arrow_column

    t = pajson.read_json(pa.BufferReader(chunk.data),
                         read_options=pajson.ReadOptions(block_size=max(1 << 20, len(chunk.data) + 1)))
    n = t.num_rows
    lines = chunk.row_lines(n)
    keep = None
    events = []
    if EVENT_KEY in t.column_names:
        is_event = t.column(EVENT_KEY).is_valid().to_numpy(zero_copy_only=False)
        if is_event.any():
            idx = np.flatnonzero(is_event)
            for i, rec in zip(idx.tolist(), t.take(pa.array(idx)).to_pylist(), strict=True):
                events.append((row0 + i, {k: v for k, v in rec.items() if v is not None}))
            keep = ~is_event
            t = t.filter(pa.array(keep))
        t = t.drop_columns([EVENT_KEY])
    rows = np.arange(row0, row0 + n, dtype=np.int64)
    piece = Piece(rows=t.num_rows, lines=None if lines is None else
                  (lines if keep is None else np.arange(lines.start, lines.stop, dtype=np.int64)[keep]))
    for name, col in zip(t.column_names, t.columns, strict=True):
        typ = col.type
        parsed = arrow_column(col, pa)
        if parsed is not None:
            piece.numeric[name], piece.present[name] = parsed
        elif pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_boolean(typ):
            piece.text[name] = text_cells([None if v is None else cell_text(v) for v in col.to_pylist()])
        elif not pa.types.is_nested(typ):
            return None
    return piece, (rows if keep is None else rows[keep]), events, n


def _records_piece(records: list[dict], lines: list[int], warnings: list[str]) -> Piece:
    """A chunk's records as a Piece; text columns keep their cells so the join can find the first bad one."""
    n = len(records)
    cols = gather_columns(records, warnings, word=f"keys in lines {lines[0]}-{lines[-1]}" if lines else "keys")
    piece = Piece(rows=n, lines=np.asarray(lines, dtype=np.int64))
    for k, (idx, vals) in cols.items():
        rows = np.asarray(idx, dtype=np.int64)
        if all(type(v) in (int, float) for v in vals):
            try:
                values = np.array(vals, dtype=np.float64)
                if len(rows) == n:
                    piece.numeric[k], piece.present[k] = values, np.broadcast_to(np.True_, n)
                else:
                    piece.sparse[k] = (rows, values)
                continue
            except OverflowError:
                pass
        piece.text[k] = (rows, [cell_text(v) for v in vals])
    return piece


def _exact_piece(path: Path, chunk, row0: int, warnings: list[str]):
    """The same from the stdlib ``json``: exact lines, and a bad line named from this chunk alone."""
    records, lines = parse_lines(path, chunk.data.obj, first_line=chunk.first_line, end=len(chunk.data))
    events, rows, row_lines = [], [], []
    for i, (rec, line) in enumerate(zip(records, lines, strict=True)):
        if rec.get(EVENT_KEY) is not None:
            events.append((row0 + i, rec))
        else:
            rows.append(i)
            row_lines.append(line)
    piece = _records_piece([records[i] for i in rows], row_lines, warnings)
    return piece, np.asarray(rows, dtype=np.int64) + row0, events, len(records)
