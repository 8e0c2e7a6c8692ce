"""The one device-to-host copy of a step's packed verdict, started now and read a step later.

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


class HostCopier:
    """Starts the per-step copy of the packed verdict to the host (two pinned buffers on CUDA)."""

    def __init__(self) -> None:
        self._pinned: list[Any] | None = None
        self._flip = 0

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
