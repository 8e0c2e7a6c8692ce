"""The rows of a tabular log (CSV, JSONL, W&B, Lightning, HF records), column by column.

Every tabular reader parses its file into a :class:`Table` (numeric columns as float64 arrays with
a presence mask, text columns as strings, the line or record number of every row) and hands it to
:func:`lossguard.io.tabular.to_runlog`. This module holds the table and the rules about its
columns: how a name is folded, which column is the step, how many columns are kept.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..metrics import EPOCH, STEP_ALIASES, is_loss, is_step_name

TIME_NAMES = ("time", "timestamp", "_timestamp", "wall_time", "walltime", "unix_time", "created_at")
"""Column names holding the Unix wall time of a row; they date segments and are not metrics."""

MAX_COLUMNS = 10_000
"""Most columns (keys) one file may hold. Past it, the first columns seen (and the step) are kept
and the rest dropped with a warning: a record with 700,000 keys (a dumped
vocabulary histogram) must not cost minutes and gigabytes. Per-layer statistics of the largest
models stay well under it (100 layers x 20 statistics = 2,000)."""

_KNOWN = {"loss", "val_loss", "grad_norm", "lr", "loss_scale", "skipped_iters", "nan_iters",
          "iter_time", "tokens", EPOCH}
_FOLD = re.compile(r"[\s\-]+")


def normalise(raw: str) -> str:
    """Lower-case a column name and fold spaces and dashes to ``_`` (as :mod:`lossguard.metrics` does)."""
    return _FOLD.sub("_", raw.strip().lower())


@dataclass
class Table:
    """The rows of one file, column by column.

    Attributes:
        names: raw column names in file order (numeric and text).
        numeric: raw name -> float64 values, NaN where the cell is missing (see ``present``); int64
            for integer columns without gaps (the step column is then used without a copy).
        present: raw name -> bool mask, False where the cell was empty or the key absent (may be a
            read-only all-True broadcast view).
        text: raw name -> (cell strings, index of the first non-numeric cell, True when a number
            came before it) for columns that are not numbers.
        lines: int64 line (or record) number of each row, for error messages.
        unit: what ``lines`` counts: ``"line"`` or ``"record"``.
        header: True when the names come from a header line (CSV), False for record keys.
        exact_lines: True when ``lines`` are the exact lines (the fast paths know this only when
            every chunk's rows are its lines); errors found on an inexact table are re-derived.
        warnings: what the reader dropped or worked around (a half-written last line, columns over
            :data:`MAX_COLUMNS`), shown by ``lossguard info``.
        sparse: raw name -> (int64 row indices, float64 values) for numeric columns present in few
            rows (JSONL keys that one record in a thousand has): memory follows the cells, not
            rows x columns. A name is in ``numeric`` or in ``sparse``, never both.
    """

    names: list[str]
    numeric: dict[str, np.ndarray] = field(default_factory=dict)
    present: dict[str, np.ndarray] = field(default_factory=dict)
    text: dict[str, tuple[list[str] | dict[int, str], int, bool]] = field(default_factory=dict)
    lines: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    unit: str = "line"
    header: bool = False
    exact_lines: bool = True
    warnings: list[str] = field(default_factory=list)
    sparse: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """Number of data rows."""
        return len(self.lines)


PANDAS_INDEX = "_index"
"""Name given to the unnamed first column ``DataFrame.to_csv()`` writes (the row index); the
leading ``_`` makes it bookkeeping (:func:`lossguard.metrics.is_bookkeeping`), never a metric."""


def pandas_index(names: list[str]) -> list[str]:
    """Header names with pandas' unnamed leading index column named :data:`PANDAS_INDEX`
    (``run.history().to_csv(path)`` writes one)."""
    if len(names) > 1 and names[0] == "" and PANDAS_INDEX not in names:
        return [PANDAS_INDEX] + names[1:]
    return names


def limit_columns(names: list[str], warnings: list[str], *, word: str = "keys") -> list[str]:
    """``names`` cut to the first :data:`MAX_COLUMNS` seen (plus the step column), with a warning when cut.

    First seen wins because the columns every row has (step, loss, lr) come first; the flood of keys
    is what one odd record adds later. Cost is linear in the number of names, with no per-name
    lookup beyond the step's.
    """
    if len(names) <= MAX_COLUMNS:
        return names
    kept = names[:MAX_COLUMNS]
    if find_step_column(kept) is None:
        step = find_step_column(names)
        if step is not None:
            kept = kept[:-1] + [step]
    warnings.append(columns_dropped(len(names), MAX_COLUMNS, word))
    return kept


def columns_dropped(total: int, kept: int, word: str = "keys") -> str:
    """The warning for a file with more than :data:`MAX_COLUMNS` columns (``word`` names them)."""
    return (f"{total:,} distinct {word}: kept the first {kept:,} and dropped {total - kept:,} "
            f"(lossguard reads at most {MAX_COLUMNS:,} columns per log)")


def gather_columns(records: list[dict], warnings: list[str], *,
                   word: str = "keys") -> dict[str, tuple[list[int], list]]:
    """Cells of metric records by key: key -> (record indices, values), in first-seen key order.

    One pass over the cells present (not records x keys), so a key that one record in a thousand
    has costs only its cells. ``None`` values and nested ones (dicts, lists: histograms, tables)
    are no cells. Past :data:`MAX_COLUMNS` keys, new keys other than a step key are dropped, with a
    warning naming ``word`` (``"keys in lines 10-20"``).
    """
    cols: dict[str, tuple[list[int], list]] = {}
    dropped: set[str] = set()
    for i, r in enumerate(records):
        for k, v in r.items():
            if v is None or isinstance(v, (dict, list)):
                continue
            c = cols.get(k)
            if c is None:
                if k in dropped or (len(cols) >= MAX_COLUMNS and not is_step_name(k)):
                    dropped.add(k)
                    continue
                c = cols[k] = ([], [])
            c[0].append(i)
            c[1].append(v)
    if dropped:
        warnings.append(columns_dropped(len(cols) + len(dropped), len(cols), word))
    return cols


def printable(name: str) -> str:
    """A column name that can be printed: lone surrogates (from ``"\\udc80"`` in JSON) become escapes."""
    if name.isascii():
        return name
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def find_step_column(names: list[str]) -> str | None:
    """The column holding the step: the first name in :data:`STEP_ALIASES` order that is present."""
    normal = {normalise(n): n for n in reversed(names)}
    for alias in STEP_ALIASES:
        if alias in normal:
            return normal[alias]
    return None


def is_known_metric(name: str) -> bool:
    """True for canonical names lossguard analyses (their columns must be numeric)."""
    return name in _KNOWN or is_loss(name)


def densify(table: Table, name: str) -> None:
    """Turn a sparse column of ``table`` into a dense one (the step and time columns are used row by row)."""
    if name not in table.sparse:
        return
    idx, vals = table.sparse.pop(name)
    values = np.full(table.rows, np.nan)
    values[idx] = vals
    present = np.zeros(table.rows, dtype=bool)
    present[idx] = True
    table.numeric[name], table.present[name] = values, present
