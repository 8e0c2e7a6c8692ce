"""Reading a big file in blocks of whole lines, and joining the columns parsed from each block.

The pyarrow fast paths of the CSV and JSONL readers parse a file block by block instead of in one
call, so that peak memory stays nearer the size of the output arrays; :func:`join_pieces` joins the
per-block columns into one :class:`~lossguard.io._table.Table`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._table import Table, add_text_columns


@dataclass
class Piece:
    """The columns of one chunk of a file, before the chunks are joined (see :func:`join_pieces`)."""

    rows: int
    numeric: dict[str, np.ndarray] = field(default_factory=dict)
    present: dict[str, np.ndarray] = field(default_factory=dict)
    text: dict[str, list[str]] = field(default_factory=dict)


CHUNK_BYTES = 4 << 20
"""Bytes parsed at a time by the pyarrow fast paths: memory stays near the size of the output arrays."""


def chunks(path: Path, *, skip_first_line: bool):
    """Yield ``(first_line, chunk)``: blocks of whole lines of about :data:`CHUNK_BYTES`.

    ``chunk`` is a memoryview into one reused buffer (no copy per block): it is valid only until
    the next block is requested, so the caller must be done with it (pyarrow copies what it
    parses into its own arrays).
    """
    with open(path, "rb") as f:
        first = f.readline() if skip_first_line else b""
        buf = bytearray(CHUNK_BYTES)
        carry = 0
        while True:
            view = memoryview(buf)
            n = f.readinto(view[carry:])
            end = carry + (n or 0)
            if not n:
                if end and bytes(view[:end]).strip():
                    yield first, view[:end]
                view.release()
                return
            cut = buf.rfind(b"\n", 0, end) + 1
            if cut == 0:  # a line longer than the buffer: grow it and read on
                view.release()
                buf.extend(bytearray(len(buf)))
                carry = end
                continue
            yield first, view[:cut]
            view.release()
            buf[:end - cut] = buf[cut:end]
            carry = end - cut


def join_pieces(pieces: list[Piece], names: list[str], table: Table) -> Table | None:
    """Concatenate chunk columns into ``table`` (names in first-seen order; gaps are missing values).

    Returns None when a column is numeric in one chunk and text in another: the exact path decides.
    """
    total = sum(p.rows for p in pieces)
    text: dict[str, list[str]] = {}
    for name in names:
        is_text = [name in p.text for p in pieces if name in p.text or name in p.numeric]
        if any(is_text) and not all(is_text):
            return None
        if any(is_text):
            cells: list[str] = []
            for p in pieces:
                cells.extend(p.text.get(name, [""] * p.rows))
            text[name] = cells
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
    add_text_columns(table, text)
    return table
