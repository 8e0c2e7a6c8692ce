"""A table of rows (CSV, JSONL, W&B, Lightning, HF records) turned into an unstitched RunLog.

:func:`to_runlog` finds the step column of a :class:`~lossguard.io._table.Table`, maps column names
through :func:`lossguard.metrics.canonical_name`, splits rows into segments and checks the values.
One place decides what is an error, so every tabular format -- and ``lossguard watch``, which
rebuilds the tail of a growing CSV, JSONL or Megatron log through it -- reports bad input the same
way.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import LogFormatError
from ..metrics import canonical_name, is_bookkeeping
from ..runlog import RunLog, RunLogBuilder
from ._table import TIME_NAMES, Table, densify, find_step_column, is_known_metric, normalise, printable


def to_runlog(table: Table, *, path: Path, format: str, segments: np.ndarray | None = None,
              segment_notes: list[str] | None = None, rename: Callable[[str], str | None] | None = None,
              dedupe: bool = False, metadata: dict | None = None, events: list[dict] | None = None) -> RunLog:
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
    for k, (lo, hi) in enumerate(zip(starts, bounds, strict=True)):
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


def _time_column(table: Table) -> np.ndarray | None:
    for raw in table.names:
        if normalise(raw) in TIME_NAMES and raw in table.sparse:
            densify(table, raw)
        if normalise(raw) in TIME_NAMES and raw in table.numeric:
            t = np.where(table.present[raw], table.numeric[raw], np.nan)
            return t
    return None
