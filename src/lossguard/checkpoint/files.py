"""On-disk pieces of a checkpoint: its description, hashing while writing, fsync, writer liveness."""
from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class CheckpointInfo:
    """What is on disk for one checkpoint.

    Attributes:
        step: the training step the checkpoint was taken after.
        path: its directory.
        valid: True when the manifest is readable and the payload has the recorded size (and, after
            :meth:`CheckpointStore.validate`, the recorded CRC-32).
        reason: why it is invalid, else ``""``.
        size: payload size in bytes (0 when missing).
        protected: True when :meth:`CheckpointStore.protect` keeps it from pruning.
    """

    step: int
    path: Path
    valid: bool
    reason: str = ""
    size: int = 0
    protected: bool = False


@lru_cache(maxsize=1)
def crc32_function() -> Callable[..., int]:
    """The CRC-32 routine used for :class:`Checksum`: ``zlib_ng.crc32`` when ``zlib-ng`` is installed,
    else the standard library's ``zlib.crc32``. Both compute the same CRC-32 (zlib-ng is a drop-in
    zlib), so a file hashed by one verifies with the other. zlib-ng folds with carry-less multiplies
    (PCLMULQDQ / VPCLMULQDQ): on this project's 2-core AMD EPYC VM it hashed 1 MiB blocks in cache
    at 56 GB/s, google-crc32c's CRC-32C at 27 GB/s and the stdlib's zlib 1.2.13 at 2-4 GB/s, and it
    releases the GIL where google-crc32c 1.9 holds it (issue 23; ``benchmarks/checksum_speed.py``).
    Resolved on first use: importing zlib-ng costs ~1.5 ms."""
    try:
        from zlib_ng import zlib_ng
    except ImportError:
        return zlib.crc32
    return zlib_ng.crc32


class Checksum:
    """CRC-32 of a byte stream (:func:`crc32_function`: zlib-ng when installed, else zlib). It
    detects damage, not tampering: a checkpoint directory is trusted like any file the user owns.
    CRC-32 is what zip and torch's own archive records use; with zlib-ng it is the fastest checksum
    available here (see :func:`fast_checksum`)."""

    NAME = "crc32"

    def __init__(self) -> None:
        self.value = 0
        self._extend = self.extender()

    def update(self, data) -> None:
        self.value = self._extend(data, self.value)

    def hexdigest(self) -> str:
        return f"{self.value:08x}"

    @classmethod
    def extender(cls) -> Callable[[Any, int], int]:
        """A function ``(bytes-like, crc) -> crc`` that extends a running value the way
        :meth:`update` does, for hot paths that keep the value themselves: one C call per buffer,
        no method frame (a checkpoint's writer calls it ~1,000 times per save, issue 23)."""
        return crc32_function()


class Crc32c(Checksum):
    """CRC-32C (Castagnoli) through ``google-crc32c`` (hardware-accelerated: SSE4.2 / ARMv8 CRC).
    The sharded store's checksum when that package is installed and zlib-ng is not (it hashes at
    half zlib-ng's CRC-32 speed here, and holds the GIL while it does); checkpoints that recorded
    CRC-32C (lossguard session 5) verify with it."""

    NAME = "crc32c"

    @classmethod
    def extender(cls) -> Callable[[Any, int], int]:
        """See :meth:`Checksum.extender` (here through ``google-crc32c``, buffers viewed, not copied)."""
        import google_crc32c
        import numpy as np

        def extend(data: Any, value: int) -> int:
            # The C extension takes bytes or an ndarray, not a memoryview: view the buffer, never copy it.
            return google_crc32c.extend(value, data if isinstance(data, bytes) else np.frombuffer(data, dtype=np.uint8))

        return extend


CHECKSUMS = {Checksum.NAME: Checksum, Crc32c.NAME: Crc32c}
"""Checksum classes by the key a manifest records them under."""


def fast_checksum() -> type[Checksum]:
    """The fastest checksum installed, for new checkpoints: CRC-32 when zlib-ng provides it, else
    CRC-32C when ``google-crc32c`` has its C implementation, else CRC-32 through the stdlib's zlib
    (speeds in :func:`crc32_function`). A manifest records which one each file used, so a
    checkpoint verifies whichever was chosen when it was written."""
    if crc32_function() is not zlib.crc32:
        return Checksum
    try:
        import google_crc32c
    except ImportError:
        return Checksum
    return Crc32c if google_crc32c.implementation == "c" else Checksum


def entry_matches(path: Path, expected: dict) -> bool:
    """True when the file's checksum equals the manifest entry's (whichever algorithm it names)."""
    for name, cls in CHECKSUMS.items():
        if name in expected:
            return file_crc(path, cls) == expected[name]
    return False


class ChecksumMismatch(OSError):
    """A checkpoint file's bytes do not match its manifest entry (raised inside DCP's read by
    :mod:`lossguard.checkpoint.dcp_io`; defined here, torch-free)."""


class HashingFile:
    """File-like object for ``torch.save`` that hashes the bytes on their way to disk."""

    def __init__(self, raw) -> None:
        self.raw, self.crc, self.size = raw, Checksum(), 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.crc.update(view)
        self.size += len(view)
        return self.raw.write(view)

    def flush(self) -> None:
        self.raw.flush()


def file_crc(path: Path, algorithm: type[Checksum] = Checksum) -> str:
    """Checksum (hex; CRC-32 by default) of a whole file, read in 4 MiB blocks."""
    crc = algorithm()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            crc.update(block)
    return crc.hexdigest()


def fsync_dir(path: Path) -> None:
    """fsync a directory, so a rename or a new entry in it survives a power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    """True when a process with this id exists on this host (a writer that may still be writing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True
