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

from ._table import Table, add_text_columns, parse_numeric


@dataclass
class Piece:
    """The columns of one chunk of a file, before the chunks are joined (see :func:`join_pieces`).

    Attributes:
        rows: number of rows parsed from the chunk.
        numeric: column -> float64/int64 values.
        present: column -> bool mask of the cells that hold a value.
        text: column -> cell strings, for columns the parser did not read as numbers.
        lines: int64 line number of each row, or None when rows and lines do not match one to one.
    """

    rows: int
    numeric: dict[str, np.ndarray] = field(default_factory=dict)
    present: dict[str, np.ndarray] = field(default_factory=dict)
    text: dict[str, list[str]] = field(default_factory=dict)
    lines: np.ndarray | None = None


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

    def row_lines(self, rows: int) -> np.ndarray | None:
        """Line number of each of ``rows`` parsed rows, when they are the chunk's lines one to one."""
        if rows != self.lines:
            return None
        return np.arange(self.first_line, self.first_line + rows, dtype=np.int64)


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


class _FirstBad(dict):
    """The cells of a text column that errors need: only the first non-numeric one, by row index."""


def join_pieces(pieces: list[Piece], names: list[str], table: Table, *, keep_text: tuple[str, ...] = ()) -> Table:
    """Concatenate chunk columns into ``table`` (names in first-seen order; gaps are missing values).

    A column the parser read as text in some chunk is re-read with :func:`parse_numeric` there: when
    every cell is a number after all, the column stays numeric; otherwise it becomes a text column
    that keeps only its first non-numeric cell (all cells for the names in ``keep_text``), so a bad
    cell in the last row is reported without re-reading the file. ``table.lines`` is set from the
    pieces' exact lines when every piece has them.
    """
    total = sum(p.rows for p in pieces)
    text: dict[str, list[str]] = {}
    for name in names:
        if name in keep_text and any(name in p.text for p in pieces):
            cells: list[str] = []
            for p in pieces:
                if name in p.text:
                    cells.extend(p.text[name])
                elif name in p.numeric:
                    cells.extend(("%g" % v) if ok else "" for v, ok in zip(p.numeric[name].tolist(),
                                                                           p.present[name].tolist()))
                else:
                    cells.extend([""] * p.rows)
            text[name] = cells
            continue
        bad = _first_text_cell(pieces, name)
        if bad is not None:
            table.text[name] = bad
            continue
        if len(pieces) == 1:
            table.numeric[name], table.present[name] = pieces[0].numeric[name], pieces[0].present[name]
            continue
        vals = [p.numeric.get(name, np.full(p.rows, np.nan)) for p in pieces]
        pres = [p.present.get(name, np.zeros(p.rows, dtype=bool)) for p in pieces]
        values = np.concatenate(vals)
        del vals
        present = np.concatenate(pres)
        table.numeric[name] = values
        table.present[name] = np.broadcast_to(np.True_, total) if present.all() else present
        for p in pieces:  # free each chunk's copy as soon as the joined column exists
            p.numeric.pop(name, None)
            p.present.pop(name, None)
    table.names = list(names)
    if pieces and all(p.lines is not None for p in pieces):
        table.lines = pieces[0].lines if len(pieces) == 1 else np.concatenate([p.lines for p in pieces])
        table.exact_lines = True
    add_text_columns(table, text)
    return table


def _first_text_cell(pieces: list[Piece], name: str) -> tuple[_FirstBad, int, bool] | None:
    """``(cells, index, numbers before)`` of the column's first non-numeric cell, or None if it is numeric.

    Chunks the parser left as text but whose cells all parse as numbers are converted in place.
    """
    offset = 0
    numbers_before = False
    for p in pieces:
        if name in p.text:
            cells = p.text.pop(name)
            parsed = parse_numeric(cells)
            if isinstance(parsed[0], int):
                i, before = parsed
                return _FirstBad({offset + i: cells[i]}), offset + i, numbers_before or before
            p.numeric[name], p.present[name] = parsed
        if name in p.present:
            numbers_before = numbers_before or bool(np.any(p.present[name]))
        offset += p.rows
    return None
