"""A table of rows (CSV, JSONL, W&B, Lightning, HF records) turned into an unstitched RunLog.

Every tabular reader parses its file into a :class:`Table` (numeric columns as float64 arrays with
a presence mask, text columns as strings, the line or record number of every row) and hands it to
:func:`to_runlog`, which finds the step column, maps column names through
:func:`lossguard.metrics.canonical_name`, splits rows into segments and checks the values. One
place decides what is an error, so every tabular format reports bad input the same way.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import LogFormatError
from ..metrics import EPOCH, STEP_ALIASES, canonical_name, is_bookkeeping, is_loss, is_step_name

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
    text: dict[str, tuple[list, int, bool]] = field(default_factory=dict)
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


def to_runlog(table: Table, *, path: Path, format: str, segments: np.ndarray | None = None,
              segment_notes: list[str] | None = None, rename: Callable[[str], str | None] | None = None,
              dedupe: bool = False, metadata: dict | None = None, events: list[dict] | None = None):
    """Build the unstitched RunLog of one file from its table.

    Args:
        table: the parsed rows.
        path: the file, named in every error.
        format: the reader's name.
        segments: int per row numbering the segment (launch) the row belongs to, in file order;
            None = one segment.
        segment_notes: a note per segment number (how its boundary was found).
        rename: maps a raw column name to its metric name, or None to drop the column;
            default :func:`canonical_name`.
        dedupe: drop a point that repeats the previous point's step and value exactly (Lightning
            and HF write ``epoch`` on both the train and the validation row of one step).
        metadata: facts to attach to the RunLog.
        events: non-metric records to attach.

    Raises:
        LogFormatError: no step column, a non-numeric metric or step value, a fractional step,
            a row with metrics but no step, or (from the builder) steps repeating or going back.
    """
    from ..runlog import RunLogBuilder

    src = str(path)
    unit = table.unit
    rename = rename or canonical_name
    step_col = find_step_column(table.names)
    if step_col is None:
        word = "column" if table.header else "key"
        raise LogFormatError(
            f"no step {word}; the {word}s are {', '.join(repr(n) for n in table.names[:12]) or 'none'}",
            path=src, where="line 1" if table.header else None,
            fix="name the step column one of: step, iteration, global_step, _step, iter "
                "(or convert the log so each row has its optimizer step)")
    if step_col in table.text:
        cells, bad, _ = table.text[step_col]
        raise LogFormatError(f"non-numeric step {cells[bad]!r} in column {step_col!r}", path=src,
                             where=f"{unit} {int(table.lines[bad])}", fix="every step must be an integer")
    densify(table, step_col)
    steps_f = table.numeric[step_col]
    step_ok = table.present[step_col]

    # Decide the metric columns: numeric ones, known metrics that are text are errors.
    metric_cols: list[tuple[str, str]] = []  # (raw, canonical)
    taken: set[str] = set()
    ignored: list[str] = []
    for raw in table.names:
        if raw == step_col or normalise(raw) in TIME_NAMES or is_bookkeeping(raw):
            continue
        name = rename(raw)
        if name is None:
            continue
        name = printable(name)
        if raw in table.text:
            cells, bad, numbers_before = table.text[raw]
            if is_known_metric(name) or numbers_before:
                raise LogFormatError(
                    f"non-numeric value {cells[bad]!r} in metric column {raw!r}", path=src,
                    where=f"{unit} {int(table.lines[bad])}",
                    fix="metric cells must be numbers, nan/inf, or empty for a missing value")
            ignored.append(raw)
            continue
        if name in taken:  # two columns aliasing to one metric: keep the second under its own name
            name = normalise(raw)
            while name in taken:
                name += "_"
        taken.add(name)
        metric_cols.append((raw, name))

    if table.rows:
        has_metric = np.zeros(table.rows, dtype=bool)
        for raw, _ in metric_cols:
            if raw in table.sparse:
                has_metric[table.sparse[raw][0]] = True
            else:
                has_metric |= table.present[raw]
        orphan = has_metric & ~step_ok
        if orphan.any():
            i = int(np.flatnonzero(orphan)[0])
            raise LogFormatError(f"a row with metric values but no {step_col!r}", path=src,
                                 where=f"{unit} {int(table.lines[i])}",
                                 fix=f"give every row its step in column {step_col!r}")
        if steps_f.dtype.kind == "f":
            usable = step_ok & has_metric
            bad = usable & ~(np.isfinite(steps_f) & (steps_f == np.floor(steps_f)) & (np.abs(steps_f) < 2.0**62))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise LogFormatError(f"step {float(steps_f[i])!r} in column {step_col!r} is not an integer",
                                     path=src, where=f"{unit} {int(table.lines[i])}",
                                     fix="every step must be a whole number")
    if steps_f.dtype == np.int64 and step_ok.all():
        steps = steps_f  # shared by every metric that is logged on every row (no copy)
    else:
        steps = np.where(step_ok, steps_f, 0).astype(np.int64)

    b = RunLogBuilder(format, unit=unit)
    if metadata:
        b.metadata.update(metadata)
    if ignored:
        b.metadata["ignored_columns"] = [printable(n) for n in ignored]
    if table.warnings:
        b.metadata["warnings"] = list(b.metadata.get("warnings", [])) + list(table.warnings)
    negative = step_ok & (steps < 0) if table.rows else None
    if negative is not None and negative.any():
        i = int(np.flatnonzero(negative)[0])
        b.metadata["warnings"] = list(b.metadata.get("warnings", [])) + [
            f"{int(negative.sum())} row(s) have a negative {step_col!r} (first {int(steps[i])} at {unit} "
            f"{int(table.lines[i])}): read as they are, before step 0 (a warm-up counted from below zero?)"]
    b.metadata["columns"] = {printable(raw): name for raw, name in metric_cols}
    times = _time_column(table)
    if segments is None:
        seg_ids = [0]
        starts = [0]
    else:
        change = np.flatnonzero(np.diff(segments) != 0) + 1
        starts = [0, *change.tolist()] if table.rows else [0]
        seg_ids = [int(segments[s]) for s in starts] if table.rows else [0]
    bounds = [*starts[1:], table.rows]
    for k, (lo, hi) in enumerate(zip(starts, bounds)):
        t0 = None
        if times is not None and hi > lo:
            tt = times[lo:hi]
            tt = tt[np.isfinite(tt)]
            t0 = float(tt[0]) if len(tt) else None
        note = ""
        if segment_notes is not None and seg_ids[k] < len(segment_notes):
            note = segment_notes[seg_ids[k]]
        seg = b.start_segment(src, start_time=t0, note=note)
        for raw, name in metric_cols:
            if raw in table.sparse:
                idx, vals = table.sparse[raw]
                a, z = np.searchsorted(idx, [lo, hi])
                s, v, w = steps[idx[a:z]], vals[a:z], table.lines[idx[a:z]]
            elif lo == 0 and hi == table.rows and table.present[raw].all():
                s, v, w = steps, table.numeric[raw], table.lines
            else:
                mask = table.present[raw][lo:hi]
                s, v, w = steps[lo:hi][mask], table.numeric[raw][lo:hi][mask], table.lines[lo:hi][mask]
            if dedupe and len(s) > 1:
                same = (s[1:] == s[:-1]) & ((v[1:] == v[:-1]) | (np.isnan(v[1:]) & np.isnan(v[:-1])))
                if same.any():
                    keep = np.concatenate([[True], ~same])
                    s, v, w = s[keep], v[keep], w[keep]
            b.add(name, s, v, where=w, segment=seg)
    for e in events or ():
        b.add_event(e)
    if not b.sources:
        b.sources.append(src)
    return b.build()


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


def _time_column(table: Table) -> np.ndarray | None:
    for raw in table.names:
        if normalise(raw) in TIME_NAMES and raw in table.sparse:
            densify(table, raw)
        if normalise(raw) in TIME_NAMES and raw in table.numeric:
            t = np.where(table.present[raw], table.numeric[raw], np.nan)
            return t
    return None
