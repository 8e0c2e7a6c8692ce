"""Cell strings and values into the columns of a :class:`~lossguard.io._table.Table`.

Dense columns (float64 values and a presence mask) for what most rows have, sparse ones (row
indices and values) for what few rows have, and for text only the first cell that is not a number:
memory follows the cells a file holds, not rows x columns or the widest cell.
"""
from __future__ import annotations

from itertools import compress

import numpy as np

from ._table import Table


def parse_numeric(cells: list[str]) -> tuple[np.ndarray, np.ndarray] | tuple[int, bool]:
    """Convert cell strings to float64 (empty or blank = missing).

    Cells are converted one by one with ``float`` (no fixed-width string array: one 10 MB cell in
    a column must not make every row 10 MB wide).

    Returns:
        ``(values, present)``, or when a cell is not a number ``(its index, True if a number came
        before it)``: a column that starts with text is a label column, one that turns to text
        part-way is a broken metric.
    """
    n = len(cells)
    present = np.fromiter(map(bool, cells), dtype=bool, count=n)
    try:
        if present.all():
            return np.fromiter(map(float, cells), dtype=np.float64, count=n), present
        values = np.full(n, np.nan)
        values[present] = np.fromiter(map(float, compress(cells, present)), dtype=np.float64,
                                      count=int(present.sum()))
        return values, present
    except (ValueError, OverflowError):
        pass
    # Some cell is blank or not a number: find which, exactly, in one pass.
    values = np.full(n, np.nan)
    seen_number = False
    for i, c in enumerate(cells):
        c = c.strip()
        present[i] = bool(c)
        if not c:
            continue
        try:
            values[i] = float(c)
            seen_number = True
        except (ValueError, OverflowError):
            return i, seen_number
    return values, present


def add_text_columns(table: Table, columns: dict[str, list[str]]) -> None:
    """Parse string columns into ``table``: numeric ones to arrays, the rest kept as text."""
    for name, cells in columns.items():
        parsed = parse_numeric(cells)
        if isinstance(parsed[0], int):
            table.text[name] = (cells, parsed[0], parsed[1])
        else:
            table.numeric[name], table.present[name] = parsed


SPARSE_BELOW = 1 / 8
"""A numeric column present in fewer than this share of the rows is kept sparse (indices + values)."""


def store_numeric(table: Table, name: str, idx: np.ndarray, values: np.ndarray, rows: int) -> None:
    """Keep the values of column ``name`` at rows ``idx`` (sorted): sparse when rare, else dense."""
    values = np.asarray(values)
    if len(idx) < rows * SPARSE_BELOW:
        table.sparse[name] = (np.asarray(idx, dtype=np.int64), np.asarray(values, dtype=np.float64))
        return
    if len(idx) == rows:  # every row: int64 kept as is (a step column is then used without a copy)
        values = values if values.dtype in (np.int64, np.float64) else values.astype(np.float64)
        table.numeric[name], table.present[name] = values, np.broadcast_to(np.True_, rows)
        return
    full = np.full(rows, np.nan)
    full[idx] = values
    present = np.zeros(rows, dtype=bool)
    present[idx] = True
    table.numeric[name], table.present[name] = full, present


def store_cells(table: Table, name: str, idx: np.ndarray, cells: list[str], rows: int, *,
                numbers_before: bool = False, row_offset: int = 0) -> bool:
    """Parse the present cells of a column: numbers go to :func:`store_numeric`, text keeps its first bad cell.

    Returns:
        True when the column is numeric.
    """
    parsed = parse_numeric(cells)
    if isinstance(parsed[0], int):
        i, before = parsed
        row = int(idx[i]) + row_offset
        table.text[name] = ({row: cells[i]}, row, numbers_before or before)
        return False
    values, present = parsed
    idx = np.asarray(idx, dtype=np.int64)
    if not present.all():
        idx, values = idx[present], values[present]
    store_numeric(table, name, idx, values, rows)
    return True
