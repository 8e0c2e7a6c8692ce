"""PendingSave: an asynchronous checkpoint save in flight, as the caller holds it.

:meth:`ShardedCheckpointStore.async_save` returns one once the state is copied to host memory; the
write, the checksums and the publication run in a background thread, which leaves its outcome
(``path`` and ``seconds``, or ``error``) in a shared dict.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ..errors import CheckpointError


class PendingSave:
    """An asynchronous save in flight. :meth:`wait` returns the published path (or raises).

    Args:
        step: the step being saved.
        thread: the background thread doing the save (None: it already finished on this thread).
        box: where the save leaves ``path`` and ``seconds``, or ``error``.
    """

    def __init__(self, step: int, thread: threading.Thread | None, box: dict[str, Any]) -> None:
        self.step, self._thread, self._box = step, thread, box

    @property
    def seconds(self) -> float | None:
        """Seconds from the save's call to its publication (None while in flight or after a failure)."""
        return self._box.get("seconds")

    def done(self) -> bool:
        """True once the checkpoint is published (or the save failed); never blocks."""
        return self._thread is None or not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> Path:
        """Block until published; returns its directory. Raises the save's error on every rank."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise CheckpointError(f"the asynchronous save of step {self.step} is still running after "
                                      f"{timeout} s", fix="wait longer, or check the filesystem")
        if "error" in self._box:
            raise self._box["error"]
        return self._box["path"]
