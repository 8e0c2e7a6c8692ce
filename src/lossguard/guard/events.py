"""The guard's JSONL log: one JSON object per line, decisions and (optionally) per-step metrics.

Decision records: ``{"step": S, "event": "skip"|"rollback"|"lr_cut"|"loss_scale_reset"|"halt"|
"replay", "reasons": [...], ...numbers}``. A rollback record also carries ``"to_step"``: lossguard's
JSONL reader starts a new segment there, so the analyser stitches the run exactly as the guard left
it. Metric records: ``{"step": S, "loss": ..., "grad_norm": ..., "lr": ..., "loss_scale": ...}``.
Timing records: ``{"step", "event": "checkpoint_save"|"checkpoint_saved"|"checkpoint_load",
"seconds", ...}`` (:meth:`EventLog.timing`; see ``docs/guard.md``).
In shadow mode decisions carry ``"shadow": true`` and a rollback names ``"would_roll_back_to"``
instead of ``"to_step"`` (nothing was rolled back, so no segment starts).
The log is strict JSON (any JSON parser reads it; never a bare ``NaN``): in a *metric* record a
non-finite value is written as the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` -- a NaN loss
is exactly what must be logged, and lossguard's JSONL reader (like pandas) reads numeric strings as
numbers, so the analyser still sees it; in a *decision* record a non-finite number is ``null``.
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from ..errors import LossguardError
from ..jsonsafe import strict_json


class EventLog:
    """Append-only JSONL writer, flushed per line so a crash loses at most the line being written.

    Args:
        path: the JSONL file (appended to: a resumed run continues its log). None = keep in memory only.
    """

    def __init__(self, path: str | os.PathLike | None) -> None:
        self.path = None if path is None else Path(path)
        self.records: list[dict[str, Any]] = []
        """Decision records written so far by this process (metric records are not kept)."""
        self._fh = None
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.path, "a", encoding="utf-8")
            except OSError as exc:
                raise LossguardError(f"cannot open the guard's log for writing ({exc.strerror})",
                                     path=self.path, fix="choose a writable log_path") from exc

    def _write(self, rec: dict[str, Any]) -> None:
        if self._fh is not None:
            self._fh.write(json.dumps(rec, allow_nan=False) + "\n")
            self._fh.flush()

    def event(self, rec: dict[str, Any]) -> None:
        """Write one decision record (adds wall time ``"time"``)."""
        rec = strict_json(dict(rec))
        rec.setdefault("time", round(time.time(), 3))
        self.records.append(rec)
        self._write(rec)

    def timing(self, rec: dict[str, Any]) -> None:
        """Write one timing record (a checkpoint save or load: ``{"step", "event", "seconds", ...}``).
        Written to the file like a decision, but not kept in :attr:`records`: timings differ from
        run to run and rank to rank, decisions must not."""
        self._write(strict_json({**rec, "time": round(time.time(), 3)}))

    def metrics(self, step: int, values: dict[str, float]) -> None:
        """Write one per-step metric record."""
        self._write({"step": int(step), **{k: _number(v) for k, v in values.items()}})

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _number(v: Any) -> Any:
    """A metric value as strict JSON: non-finite floats as the strings the readers parse back."""
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    return v
