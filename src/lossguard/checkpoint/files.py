"""On-disk pieces of a checkpoint: its description, hashing while writing, fsync, writer liveness."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CheckpointInfo:
    """What is on disk for one checkpoint.

    Attributes:
        step: the training step the checkpoint was taken after.
        path: its directory.
        valid: True when the manifest is readable and the payload has the recorded size (and, after
            :meth:`CheckpointStore.validate`, the recorded SHA-256).
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


class HashingFile:
    """File-like object for ``torch.save`` that hashes the bytes on their way to disk."""

    def __init__(self, raw) -> None:
        self.raw, self.sha, self.size = raw, hashlib.sha256(), 0

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.sha.update(view)
        self.size += len(view)
        return self.raw.write(view)

    def flush(self) -> None:
        self.raw.flush()


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
