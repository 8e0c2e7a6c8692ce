"""HF Transformers ``trainer_state.json``: the ``log_history`` the Trainer saves with every checkpoint.

``log_history`` holds three kinds of record, all with ``step`` and ``epoch``:

* train records ``{"loss", "grad_norm", "learning_rate", "epoch", "step"}`` (``loss`` is the mean
  over the ``logging_steps`` since the previous record);
* eval records ``{"eval_loss", "eval_runtime", ...}`` (``eval_loss`` -> ``val_loss``);
* one final summary ``{"train_runtime", "train_loss", "total_flos", ...}``: its ``train_loss`` is
  the average over the whole run, so it must not become a loss point; it is kept in
  ``metadata["train_summary"]``.

The file is written by ``TrainerState.save_to_json`` (``json.dumps(..., indent=2, sort_keys=True)``).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import LogFormatError
from ..runlog import RunLog
from .tabular import to_runlog
from .csv import read_bytes
from .jsonl_records import records_table

NAME = "hf_trainer_state"
_SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos")
_STATE_FACTS = ("global_step", "max_steps", "num_train_epochs", "logging_steps", "eval_steps", "save_steps",
                "train_batch_size", "best_metric", "best_model_checkpoint")


def sniff(path: Path, head: bytes) -> bool:
    """True for a JSON object whose head has a ``"log_history"`` key."""
    return head.lstrip()[:1] == b"{" and b'"log_history"' in head


def read(path: Path, *, root: Path | None = None):
    """Read a ``trainer_state.json`` into an unstitched RunLog of one segment.

    Raises:
        LogFormatError: not JSON, no ``log_history`` list, a record that is not an object, a
            non-numeric metric, or steps going backwards; the message names the record.
    """
    path = Path(path)
    data = read_bytes(path)
    src = str(path)
    try:
        state = json.loads(data)
    except (ValueError, RecursionError) as exc:
        where = f"line {exc.lineno}" if hasattr(exc, "lineno") else None
        raise LogFormatError(f"not valid JSON ({exc})", path=src, where=where,
                             fix="the file may be truncated; use the trainer_state.json of an intact checkpoint"
                             ) from None
    if not isinstance(state, dict) or not isinstance(state.get("log_history"), list):
        raise LogFormatError("no 'log_history' list in this JSON", path=src,
                             fix="point lossguard at the trainer_state.json the HF Trainer writes in each checkpoint")
    records, numbers = [], []
    summary = None
    for i, rec in enumerate(state["log_history"]):
        if not isinstance(rec, dict):
            raise LogFormatError(f"a {type(rec).__name__} in log_history where a record object was expected",
                                 path=src, where=f"record {i}", fix="each log_history entry must be a JSON object")
        if any(k in rec for k in _SUMMARY_KEYS):
            summary = rec  # the end-of-training average, not a point of the curve
            continue
        records.append(rec)
        numbers.append(i)
    table = records_table(records, numbers, unit="record")
    metadata = {k: state[k] for k in _STATE_FACTS if k in state}
    if summary is not None:
        metadata["train_summary"] = summary
    if not records:
        raise LogFormatError("log_history holds no train or eval records", path=src,
                             fix="the run logged nothing yet; set logging_steps lower or read a later checkpoint")
    return to_runlog(table, path=path, format=NAME, dedupe=True, metadata=metadata)


def collapse(logs: list) -> list:
    """Turn several ``trainer_state.json`` files of one run into segments that do not repeat each other.

    Every checkpoint of an HF run saves the *whole* history so far, so ``checkpoint-500`` and
    ``checkpoint-1000`` overlap: reading both as launches would report a false rollback. Files whose
    points all reappear in a later file are dropped; a file that shares a prefix with an earlier one
    (a run resumed from an older checkpoint) keeps only the points from where they part, so stitching
    sees a real rollback exactly where the histories diverge. Files are ordered by ``global_step``
    within a history, and by modification time between diverging histories.

    Args:
        logs: unstitched RunLogs read by this module (one segment each).

    Returns:
        The logs to keep, trimmed, in write order.
    """
    import os
    from dataclasses import replace


    if len(logs) < 2:
        return logs

    def points(log) -> set[tuple[str, int, float]]:
        return {(m, int(s), float(v)) for m, ser in log.series.items()
                for s, v in zip(ser.steps, ser.values, strict=True)}

    def mtime(log) -> float:
        try:
            return os.path.getmtime(log.sources[0])
        except OSError:
            return 0.0

    sets = [points(log) for log in logs]
    keep = [i for i in range(len(logs))
            if not any(j != i and sets[i] <= sets[j] and (sets[i] != sets[j] or j < i) for j in range(len(logs)))]
    keep.sort(key=lambda i: (mtime(logs[i]), logs[i].metadata.get("global_step") or 0))
    out: list[RunLog] = []
    seen: set[tuple[str, int, float]] = set()
    for i in keep:
        log = logs[i]
        fresh = sets[i] - seen
        if not fresh:
            continue
        if out:  # trim the shared prefix: keep points from the first step that is new
            start = min(s for _, s, _ in fresh)
            series = {}
            for m, ser in log.series.items():
                mask = ser.steps >= start
                if mask.any():
                    series[m] = replace(ser, steps=ser.steps[mask], values=ser.values[mask],
                                        segment=ser.segment[mask], alive=ser.alive[mask])
            first = min(int(s.steps.min()) for s in series.values())
            seg = replace(log.segments[0], first_step=first,
                          note=f"history diverges from the earlier trainer_state.json at step {start}")
            log = replace(log, series=series, segments=[seg])
        out.append(log)
        seen |= sets[i]
    return out
