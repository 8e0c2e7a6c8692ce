"""Decoder for logs rewritten whole rather than appended: HF ``trainer_state.json``, Lightning
``metrics.csv``, W&B exports.

Their writers replace the file each time (HF's Trainer dumps the whole ``log_history`` at every
checkpoint; Lightning's CSVLogger rewrites ``metrics.csv`` on every save). There are no "new bytes"
to parse, so when the file changes it is read again with its own reader and only the points past
the newest step already handed over are passed on. A read that fails (the writer is mid-write)
is simply retried at the next change. The newest steps are shared by every file of the run read by
the same reader, because every HF checkpoint repeats the whole history (``checkpoint-500`` and
``checkpoint-1000`` must not look like a rollback, as in :func:`lossguard.io.hf_trainer_state.collapse`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import LossguardError
from ..io import require_reader
from .history import Points


class WholeFileDecoder:
    """Re-reads a rewritten file and hands over its new points.

    Args:
        path: the file.
        format: the reader's name (``hf_trainer_state``, ``lightning``, ``wandb``).
        newest: metric -> newest step handed over, shared by the run's files of this format.
    """

    def __init__(self, path: str, format: str, newest: dict[str, int]) -> None:
        self.path = path
        self.format = format
        self.newest = newest
        self.failed: str | None = None  # why the last read failed (a file mid-write), if it did

    partial = b""

    def restart(self) -> None:
        """A rewritten file is read whole anyway: nothing to forget."""

    def flush(self) -> list[Points]:
        """Nothing is pending between reads."""
        return []

    def feed(self, data: bytes) -> list[Points]:
        """The file changed: read it again and return the points newer than those handed over."""
        try:
            log = require_reader(self.format).read(Path(self.path))
        except LossguardError as exc:
            self.failed = str(exc)
            return []
        self.failed = None
        series = {}
        for name, s in log.series.items():
            last = self.newest.get(name)
            keep = np.ones(len(s.steps), dtype=bool) if last is None else s.steps > last
            if keep.any():
                series[name] = (s.steps[keep], s.values[keep])
                self.newest[name] = int(s.steps[keep].max())
        start = log.segments[0].start_time if log.segments else None
        note = log.segments[0].note if log.segments else ""
        return [Points(self.path, series, note=note, start_time=start)] if series else []
