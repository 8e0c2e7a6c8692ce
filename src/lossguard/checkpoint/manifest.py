"""A checkpoint directory's ``manifest.json``: what it lists, how it is written, how it is checked.

The manifest is written last and fsynced, before the directory is renamed into place (a sharded
checkpoint's right after the rename, with ``.metadata`` and the parent: :mod:`.sharded_publish`); it
lists every file of the checkpoint with its size and checksum (``state.pt`` alone for a whole-model
checkpoint; the ``.distcp`` shards and DCP's ``.metadata`` for a sharded one). A directory whose
manifest is missing, unreadable or disagrees with the files is not a valid checkpoint.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .files import CheckpointInfo, entry_matches

PAYLOAD = "state.pt"
"""The ``torch.save`` payload of a whole-model checkpoint."""
MANIFEST = "manifest.json"
"""The manifest's file name, in every checkpoint directory."""
FORMAT = 1
"""Manifest format of a whole-model checkpoint (a sharded one is ``SHARDED_FORMAT``)."""


def write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    """Write ``manifest`` as ``directory/manifest.json`` and fsync it."""
    with open(directory / MANIFEST, "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())


def inspect_checkpoint(step: int, path: Path, *, checksum: bool, protected: bool) -> CheckpointInfo:
    """Check the checkpoint directory ``path`` of ``step`` against its manifest.

    Args:
        step: the step its directory name says.
        path: the directory.
        checksum: also verify every file's checksum (reads every byte); else sizes only.
        protected: recorded in the answer (the store's protection of ``step``).
    """
    def bad(reason: str, size: int = 0) -> CheckpointInfo:
        return CheckpointInfo(step, path, False, reason, size, protected)

    try:
        manifest = json.loads((path / MANIFEST).read_text())
        files = manifest["files"]
        if not isinstance(files, dict) or not files:
            return bad(f"{MANIFEST} lists no files")
        if manifest.get("step") != step:
            return bad(f"manifest says step {manifest.get('step')!r}, directory says {step}")
    except FileNotFoundError:
        return bad(f"{MANIFEST} is missing (an incomplete or foreign checkpoint)")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return bad(f"{MANIFEST} is unreadable ({exc})")
    total = 0
    for name, expected in sorted(files.items()):
        try:
            size = (path / name).stat().st_size
        except OSError:
            return bad(f"{name} is missing", total)
        total += size
        if not isinstance(expected, dict) or size != expected.get("size"):
            recorded = expected.get("size") if isinstance(expected, dict) else None
            return bad(f"{name} has {size} bytes, the manifest recorded {recorded}", total)
    if checksum:
        for name, expected in sorted(files.items()):
            if not entry_matches(path / name, expected):  # CRC-32, or a sharded store's CRC-32C
                return bad(f"{name} does not match its CRC-32 in {MANIFEST} (corrupted)", total)
    return CheckpointInfo(step, path, True, "", total, protected)
