"""Weights & Biases run histories: the run's own file, and the exports (read without ``wandb``).

Four layouts:

* An offline run's (or a not yet synced run's) ``run-<id>.wandb`` transaction log, read with the
  W&B SDK's own reader (extra ``wandb``; see :mod:`lossguard.io._wandb_history`).
* The CSV the W&B UI downloads from a chart ("Export panel data" -> CSV): a ``Step`` column and,
  per run shown, ``<run name> - <metric>`` plus its ``<run name> - <metric>__MIN`` and ``__MAX``
  companions (the min/max of the points W&B's sampling folded together). The companions are
  dropped. One run per file is expected; a file with several runs is an error naming them, since
  their steps would collide.
* ``run.history().to_csv(path)``: pandas' CSV of the same records, with its unnamed index column
  first; the step is ``train/global_step`` where a framework logged one (HF), else ``_step``.
* JSON / JSONL dumps of ``run.history()`` (pandas ``to_json(orient="records"[, lines=True])``) or of
  ``list(run.scan_history())``: records keyed ``_step``, ``_runtime``, ``_timestamp`` and metric
  keys such as ``train/loss``. ``_timestamp`` dates the segment; the other ``_`` keys are W&B
  bookkeeping, not metrics.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import LogFormatError
from ..metrics import canonical_name, is_bookkeeping
from . import _wandb_history, jsonl
from .jsonl_records import records_table, split_events
from .csv import _first_line, check_file, delimiter_of, read_bytes, read_table
from .tabular import to_runlog

NAME = "wandb"
_RUN_COLUMN = re.compile(r"^(?P<run>.+?) - (?P<metric>.+?)(?P<agg>__MIN|__MAX)?$")


def _csv_columns(head: bytes) -> list[str] | None:
    header = _first_line(head)
    if not header or delimiter_of(header) != ",":
        return None
    return [c.strip().strip('"') for c in header.split(",")]


def sniff(path: Path, head: bytes) -> bool:
    """True for a ``run-*.wandb`` file, a W&B chart CSV (``Step`` + ``<run> - <metric>`` columns)
    or a history dump (``_step``)."""
    if head.startswith(_wandb_history.MAGIC):
        return True
    start = head.lstrip()[:1]
    if start in (b"{", b"["):
        first = head.lstrip()[:4096]
        return b'"_step"' in first and (b'"_runtime"' in head or b'"_timestamp"' in head)
    cols = _csv_columns(head)
    if not cols:
        return False
    if "_step" in cols and ("_runtime" in cols or "_timestamp" in cols):
        return True  # run.history().to_csv(): W&B's own keys as columns
    if "Step" not in cols:
        return False
    return any(" - " in c for c in cols if c != "Step")


def _history_rename(raw: str) -> str | None:
    if is_bookkeeping(raw):
        return None  # _runtime, _wandb, train/global_step: bookkeeping (the step is taken before renaming)
    return canonical_name(raw)


def _read_csv(path: Path):
    table = read_table(path)
    if "_step" in table.names:
        # run.history().to_csv(): one row per wandb.log call. HF logs eval results in calls of their
        # own that repeat train/epoch at the same train/global_step: kept once.
        return to_runlog(table, path=path, format=NAME, rename=_history_rename, dedupe=True)
    runs: dict[str, None] = {}
    metric_of: dict[str, str | None] = {}
    for col in table.names:
        m = _RUN_COLUMN.match(col)
        if col == "Step" or m is None:
            metric_of[col] = None
            continue
        runs.setdefault(m.group("run"), None)
        metric_of[col] = None if m.group("agg") else canonical_name(m.group("metric"))
    if len(runs) > 1:
        raise LogFormatError(f"this W&B export holds {len(runs)} runs: {', '.join(repr(r) for r in runs)}",
                             path=str(path), where="line 1",
                             fix="export one run per file (hide the other runs in the W&B panel before "
                                 "downloading), or read each run's file separately")
    metadata = {"run": next(iter(runs))} if runs else {}
    return to_runlog(table, path=path, format=NAME, rename=metric_of.get, metadata=metadata)


def _read_json_array(path: Path, data: bytes):
    try:
        records = json.loads(data)
    except (ValueError, RecursionError) as exc:
        where = f"line {exc.lineno}" if hasattr(exc, "lineno") else None
        raise LogFormatError(f"not valid JSON ({exc})", path=str(path), where=where,
                             fix="the export may be truncated; dump the history again") from None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise LogFormatError("expected a JSON array of history records", path=str(path),
                             fix='dump run.history() with to_json(orient="records") or list(run.scan_history())')
    rows, lines, seg, notes, events = split_events(records, list(range(len(records))))
    table = records_table(rows, lines, unit="record")
    return to_runlog(table, path=path, format=NAME, rename=_history_rename, events=events, dedupe=True,
                     segments=seg if len(notes) > 1 else None, segment_notes=notes)


def read(path: Path, *, root: Path | None = None):
    """Read one W&B run file (``run-*.wandb``) or export (chart CSV, history JSON array or JSONL)
    into an unstitched RunLog.

    Raises:
        LogFormatError: several runs in one CSV, invalid JSON, a non-numeric metric, duplicate or
            backward steps; the message names the line or record.
    """
    path = Path(path)
    check_file(path)
    with open(path, "rb") as f:
        head = f.read(65536)
    if head.startswith(_wandb_history.MAGIC):
        return _wandb_history.read(path)
    start = head.lstrip()[:1]
    if start == b"[":
        return _read_json_array(path, read_bytes(path))
    if start == b"{":
        return jsonl.read(path, root=root, format=NAME, rename=_history_rename, dedupe=True)
    return _read_csv(path)
