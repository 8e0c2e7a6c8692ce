"""The one device-to-host transfer of a step's packed verdict: read at once, or started now and read a step later.

Device work per step -- the global gradient norm, two ring-buffer median/MAD updates, the finite
checks and the verdict -- is packed into one small tensor copied to the host once: at once on CPU,
one step late on CUDA, where a rollback therefore acts one step late.

On CUDA the guard defers reading the verdict by one step (``GuardConfig.defer_host_read``) so the
GPU never waits for the host: the copy goes into one of two pinned buffers (the previous step's
copy may still be unread) and a CUDA event marks when it has landed.
"""
from __future__ import annotations

from typing import Any


class PendingCopy:
    """A device-to-host copy in flight: :meth:`tolist` waits for its event, then reads the buffer.

    Args:
        buf: the pinned host buffer the copy lands in.
        event: the CUDA event recorded right after the copy was queued.
    """

    def __init__(self, buf: Any, event: Any) -> None:
        self.buf, self.event = buf, event

    def tolist(self) -> list:
        """The copied values (blocks until the copy has landed)."""
        self.event.synchronize()
        return self.buf.tolist()


class VerdictTransfer:
    """Hands each step's packed verdict to the host side: at once, or one step late (``deferred``).

    Args:
        deferred: copy each step's verdict asynchronously and process it at the next step
            (``GuardConfig.defer_host_read``); False: process it in the step that made it.
    """

    def __init__(self, *, deferred: bool) -> None:
        self.deferred = deferred
        self._pinned: list[Any] | None = None
        self._flip = 0
        self._pending: tuple[Any, dict[str, Any]] | None = None

    def push(self, packed: Any, meta: dict[str, Any]) -> tuple[Any, dict[str, Any]] | None:
        """This step's ``(packed, meta)``; returns the ``(values, meta)`` to process now: this
        step's, or -- deferred -- the previous step's (None at the first step)."""
        if not self.deferred:
            return packed, meta
        ready, self._pending = self._pending, (self.start(packed), meta)
        return ready

    def drain(self) -> tuple[Any, dict[str, Any]] | None:
        """The deferred verdict not processed yet (None if there is none); it is handed over once."""
        ready, self._pending = self._pending, None
        return ready

    def drop(self) -> None:
        """Forget the deferred verdict (a rollback made it moot)."""
        self._pending = None

    def start(self, packed: Any) -> Any:
        """Queue the copy of ``packed``; returns something with ``tolist()`` (a CPU tensor or a
        :class:`PendingCopy`)."""
        import torch

        if not packed.is_cuda:
            return packed.to("cpu", non_blocking=True)
        if self._pinned is None:
            self._pinned = [torch.empty(packed.shape, dtype=packed.dtype, pin_memory=True) for _ in range(2)]
            self._flip = 0
        buf = self._pinned[self._flip]
        self._flip ^= 1
        buf.copy_(packed, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        return PendingCopy(buf, done)
