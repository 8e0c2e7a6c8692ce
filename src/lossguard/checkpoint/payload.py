"""A whole-model checkpoint's payload: ``torch.save`` hashed on the way to disk, ``torch.load`` with clear errors.

Writing hashes the bytes as torch writes them (one pass, no re-read) and fsyncs the file. Loading
tries ``weights_only=True`` first unless told otherwise: a payload this store wrote and whose
checksum matched may hold other objects (a scheduler, a sampler), and is then loaded in full.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any, cast

from ..errors import CheckpointError
from .files import HashingFile


def write_payload(path: Path, state: dict) -> tuple[int, str]:
    """Write ``state`` to ``path`` with ``torch.save`` and fsync it; returns ``(size, CRC-32 hex)``."""
    import torch

    with open(path, "wb") as raw:
        hashing = HashingFile(raw)
        torch.save(state, cast(IO[bytes], hashing))  # a file-like wrapper that hashes as torch writes
        raw.flush()
        os.fsync(raw.fileno())
    return hashing.size, hashing.crc.hexdigest()


def load_payload(path: Path, map_location: Any, weights_only: bool | None) -> dict:
    """``torch.load`` of a payload (``weights_only``: True, False, or None = True then False).

    Raises:
        CheckpointError: the checkpoint is sharded (no payload), the payload holds objects
            ``weights_only=True`` refuses, or it cannot be unpickled.
    """
    import pickle

    import torch

    if not path.exists():  # a sharded (DCP) checkpoint has no single payload to load
        raise CheckpointError(f"{path.parent.name} is a sharded checkpoint (no {path.name})", path=path.parent,
                              fix="load it with lossguard.checkpoint.ShardedCheckpointStore on every rank")
    try:
        return torch.load(path, map_location=map_location, weights_only=weights_only is not False)
    except pickle.UnpicklingError as exc:
        if weights_only is True:
            raise CheckpointError(f"the payload holds objects weights_only=True refuses ({exc})".splitlines()[0],
                                  path=path, fix="load with weights_only=False if you trust the file") from exc
    except (RuntimeError, EOFError, OSError) as exc:
        raise CheckpointError(f"torch.load failed: {str(exc).splitlines()[0]}", path=path,
                              fix="the file is damaged; delete it and load an older step") from exc
    return torch.load(path, map_location=map_location, weights_only=False)
