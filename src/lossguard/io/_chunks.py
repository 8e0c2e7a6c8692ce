"""Reading a big file in blocks of whole lines, and joining the columns parsed from each block.

The pyarrow fast paths of the CSV and JSONL readers parse a file block by block instead of in one
call, so that peak memory stays nearer the size of the output arrays; :func:`join_pieces` joins the
per-block columns into one :class:`~lossguard.io._table.Table`.

Each block knows the line number it starts on and how many lines it holds, so when a block's rows
are exactly its lines (no blank lines, no quoted newlines: the common case) every row's line number
is exact and an error found on the fast path is reported there, at the fast path's speed, instead
of re-reading the whole file on the exact path.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from ._columns import SPARSE_BELOW, add_text_columns, store_cells, store_numeric
from ._table import Table


@dataclass
class Piece:
    """The columns of one chunk of a file, before the chunks are joined (see :func:`join_pieces`).

    Attributes:
        rows: number of rows parsed from the chunk.
        numeric: column -> float64/int64 values.
        present: column -> bool mask of the cells that hold a value.
        text: column -> (int64 rows, their cell strings) for columns the parser did not read as
            numbers (empty cells left out).
        sparse: column -> (int64 rows, float64 values) for numeric columns kept sparse.
        lines: line number of each row (an int64 array, or a ``range`` for a whole chunk), or None
            when rows and lines do not match one to one.
    """

    rows: int
    numeric: dict[str, np.ndarray] = field(default_factory=dict)
    present: dict[str, np.ndarray] = field(default_factory=dict)
    text: dict[str, tuple[np.ndarray, list[str]]] = field(default_factory=dict)
    sparse: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    lines: np.ndarray | range | None = None

    def cells_of(self, name: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(rows, values) of a numeric column in this piece, or None when absent."""
        if name in self.sparse:
            return self.sparse[name]
        if name in self.numeric:
            present = self.present[name]
            if present.all():
                return np.arange(self.rows, dtype=np.int64), self.numeric[name]
            idx = np.flatnonzero(present)
            return idx, self.numeric[name][idx]
        return None


def text_cells(values: list) -> tuple[np.ndarray, list[str]]:
    """(rows, strings) of the non-empty cells of a parsed text column (None = empty)."""
    idx = [i for i, v in enumerate(values) if v is not None and v != ""]
    return np.asarray(idx, dtype=np.int64), [values[i] if isinstance(values[i], str) else str(values[i]) for i in idx]


@dataclass
class Chunk:
    """Whole lines of a file.

    Attributes:
        header: the file's first line when the reader asked to skip it, else ``b""``.
        data: the lines (a view into a reused buffer: valid until the next chunk is requested).
        first_line: 1-based line number of the chunk's first line.
        lines: how many lines the chunk holds (the last may lack its ``\\n``).
    """

    header: bytes
    data: memoryview
    first_line: int
    lines: int

    def row_lines(self, rows: int) -> range | None:
        """Line number of each of ``rows`` parsed rows, when they are the chunk's lines one to one.

        A ``range``, not an array: consecutive chunks then join into one ``arange`` at the end, with
        no per-chunk copy held while the rest of the file is parsed.
        """
        if rows != self.lines:
            return None
        return range(self.first_line, self.first_line + rows)


CHUNK_BYTES = 4 << 20
"""Bytes parsed at a time by the pyarrow fast paths: memory stays near the size of the output arrays."""


def chunks(path: Path, *, skip_first_line: bool, limit: int | None = None) -> Iterator[Chunk]:
    """Yield blocks of whole lines of about :data:`CHUNK_BYTES` (only the first ``limit`` bytes).

    ``Chunk.data`` is a memoryview into one reused buffer (no copy per block): it is valid only
    until the next block is requested, so the caller must be done with it (pyarrow copies what it
    parses into its own arrays).
    """
    with open(path, "rb") as f:
        first = f.readline() if skip_first_line else b""
        if limit is not None and len(first) > limit:
            return
        left = None if limit is None else limit - len(first)
        line = 2 if skip_first_line else 1
        buf = bytearray(CHUNK_BYTES)
        carry = 0
        while True:
            view = memoryview(buf)
            want = len(buf) - carry if left is None else min(len(buf) - carry, left)
            n = f.readinto(view[carry:carry + want]) if want > 0 else 0
            if left is not None:
                left -= n or 0
            end = carry + (n or 0)
            if not n:
                if end and bytes(view[:end]).strip():
                    yield Chunk(first, view[:end], line, buf.count(b"\n", 0, end) + (buf[end - 1] != 0x0A))
                view.release()
                return
            cut = buf.rfind(b"\n", 0, end) + 1
            if cut == 0:  # a line longer than the buffer: grow it and read on
                view.release()
                buf.extend(bytearray(len(buf)))
                carry = end
                continue
            count = buf.count(b"\n", 0, cut)
            yield Chunk(first, view[:cut], line, count)
            view.release()
            line += count
            buf[:end - cut] = buf[cut:end]
            carry = end - cut


def join_pieces(pieces: list[Piece], names: list[str], table: Table, *, keep_text: tuple[str, ...] = ()) -> Table:
    """Concatenate chunk columns into ``table`` (names in first-seen order; gaps are missing values).

    A column the parser read as text in some chunk is re-read with :func:`parse_numeric` there: when
    every cell is a number after all, the column stays numeric; otherwise it becomes a text column
    that keeps only its first non-numeric cell (all cells for the names in ``keep_text``), so a bad
    cell in the last row is reported without re-reading the file. Columns present in few rows are
    joined sparse. ``table.lines`` is set from the pieces' exact lines when every piece has them.
    """
    total = sum(p.rows for p in pieces)
    offsets = np.cumsum([0] + [p.rows for p in pieces])[:-1].tolist()
    text: dict[str, list[str]] = {}
    for name in names:
        if name in keep_text and any(name in p.text for p in pieces):
            text[name] = _dense_cells(pieces, name)
            continue
        if _first_text_cell(pieces, offsets, name, table):
            continue
        if len(pieces) == 1 and name in pieces[0].numeric:
            table.numeric[name], table.present[name] = pieces[0].numeric[name], pieces[0].present[name]
        elif sum(_count(p, name) for p in pieces) >= total * SPARSE_BELOW:
            values = np.concatenate([_dense(p, name)[0] for p in pieces])
            present = np.concatenate([_dense(p, name)[1] for p in pieces])
            table.numeric[name] = values
            table.present[name] = np.broadcast_to(np.True_, total) if present.all() else present
        else:
            cells = [(off, p.cells_of(name)) for off, p in zip(offsets, pieces, strict=True)]
            parts = [(off, c) for off, c in cells if c is not None]
            idx = np.concatenate([c[0] + off for off, c in parts]) if parts else np.zeros(0, dtype=np.int64)
            vals = np.concatenate([c[1] for _, c in parts]) if parts else np.zeros(0)
            store_numeric(table, name, idx, vals, total)
        for p in pieces:  # free each chunk's copy as soon as the joined column exists
            p.numeric.pop(name, None)
            p.present.pop(name, None)
            p.sparse.pop(name, None)
    table.names = list(names)
    if pieces and all(p.lines is not None for p in pieces):
        table.lines = _joined_lines(pieces, offsets, total)
        table.exact_lines = True
    add_text_columns(table, text)
    return table


def _joined_lines(pieces: list[Piece], offsets: list[int], total: int) -> np.ndarray:
    """The pieces' line numbers as one array: one ``arange`` when they are consecutive ranges."""
    ranges = [p.lines for p in pieces if isinstance(p.lines, range)]
    if len(ranges) == len(pieces) and all(a.stop == b.start for a, b in zip(ranges, ranges[1:], strict=False)):
        return np.arange(ranges[0].start, ranges[0].start + total, dtype=np.int64)
    lines = np.empty(total, dtype=np.int64)
    for off, p in zip(offsets, pieces, strict=True):  # filled piece by piece: no second full-length copy
        if p.lines is not None:  # always: the caller joins only pieces that all have their lines
            lines[off:off + p.rows] = p.lines
        p.lines = None
    return lines


def _first_text_cell(pieces: list[Piece], offsets: list[int], name: str, table: Table) -> bool:
    """Record the column's first non-numeric cell in ``table.text`` and return True, or False if it is numeric.

    Chunks the parser left as text but whose cells all parse as numbers are converted in place.
    """
    numbers_before = False
    for off, p in zip(offsets, pieces, strict=True):
        if name in p.text:
            idx, cells = p.text.pop(name)
            scratch = Table(names=[])
            if not store_cells(scratch, name, idx, cells, p.rows, numbers_before=numbers_before, row_offset=off):
                table.text[name] = scratch.text[name]
                return True
            if name in scratch.sparse:
                p.sparse[name] = scratch.sparse[name]
            else:
                p.numeric[name], p.present[name] = scratch.numeric[name], scratch.present[name]
        got = p.cells_of(name)
        numbers_before = numbers_before or (got is not None and len(got[0]) > 0)
    return False


def _count(p: Piece, name: str) -> int:
    if name in p.sparse:
        return len(p.sparse[name][0])
    if name in p.numeric:
        return int(np.count_nonzero(p.present[name]))
    return 0


def _dense(p: Piece, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, present) of a column over every row of the piece."""
    if name in p.numeric:
        return p.numeric[name], np.broadcast_to(p.present[name], p.rows)
    values = np.full(p.rows, np.nan)
    present = np.zeros(p.rows, dtype=bool)
    if name in p.sparse:
        idx, vals = p.sparse[name]
        values[idx] = vals
        present[idx] = True
    return values, present


def _dense_cells(pieces: list[Piece], name: str) -> list[str]:
    """Every cell of a column as a string (empty where missing), for the columns read as labels."""
    cells: list[str] = []
    for p in pieces:
        part = [""] * p.rows
        if name in p.text:
            idx, strings = p.text[name]
            for i, c in zip(idx.tolist(), strings, strict=True):
                part[i] = c
        else:
            got = p.cells_of(name)
            if got is not None:
                for i, v in zip(got[0].tolist(), got[1].tolist(), strict=True):
                    part[i] = "%g" % v
        cells.extend(part)
    return cells
