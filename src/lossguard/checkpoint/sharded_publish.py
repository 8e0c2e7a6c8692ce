"""The end of a sharded save, on rank 0 inside DCP's ``finish``: manifest, rename, fsync, housekeeping.

:class:`~lossguard.checkpoint.sharded_writer.PublishingWriter` calls :func:`publish_files` on the
coordinator once every rank's shards are written and fsynced (DCP gathers the ranks' results
first: that gather is the barrier) and DCP's ``.metadata`` is written. Other ranks wait in DCP's
broadcast of the outcome meanwhile, so rank 0's housekeeping (``_recover``, ``prune``) still
finishes before any rank can start its next save and make the next temp directory.

What is fsynced, and why that is enough (a crash must never leave a checkpoint that ``restore()``
takes as valid when it is not; a published one must survive a power loss):

- every shard and ``.metadata``: by DCP itself (``sync_files=True``), as a plain ``dcp.save``;
- the manifest, once, *after* the rename, then the parent directory. On ext4 (and XFS) the
  manifest's fsync commits one journal transaction that holds the rename too, so the parent's
  fsync finds nothing left to write: one commit where the store used to pay four (rank file,
  manifest, temp directory, parent). Until those fsyncs return, a power loss can leave the final
  name with an empty or missing manifest: that checkpoint is *invalid* (the listing requires a
  readable manifest whose sizes match, a load checks every checksum) and ``restore()`` passes over
  it to the previous one, as if the save had not happened. A process kill in that window loses
  nothing: the page cache holds every byte. The temp directory is not fsynced on its own: a file
  entry lost with it makes the checkpoint invalid (missing file), never wrongly valid.
- overwriting an existing checkpoint of the same step (a rare re-save) keeps the old order --
  manifest fsynced before the two renames -- so ``_recover`` never drops the old copy for a new one
  whose manifest could still be lost.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .files import Checksum, file_crc, fsync_dir
from .manifest import MANIFEST
from .sharded_layout import SHARDED_FORMAT

if TYPE_CHECKING:
    from .sharded import ShardedCheckpointStore


class PublishFailed(OSError):
    """Rank 0 could not write the manifest or rename the checkpoint into place (raised inside DCP's
    ``finish``, so DCP re-raises it on every rank; a plain ``OSError`` subclass so it pickles)."""


def default_stager() -> Any:
    """The stager ``dcp.async_save`` uses when given only a checkpoint id. Given a writer, it stages
    through the writer instead (``FileSystemWriter``'s blocking full copy: 0.2 s and +200 MiB for a
    192 MiB checkpoint, against 0.08 s measured in benchmarks/checkpoint_dcp.py); None on a torch
    without ``DefaultStager``."""
    try:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    except ImportError:
        return None
    return DefaultStager(StagingOptions(False, False, False, False))


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish_files(store: ShardedCheckpointStore, step: int, tmp: Path, files: dict[str, Any]) -> None:
    """Rank 0: write the manifest of ``tmp`` from every rank's file table, rename it to the
    checkpoint of ``step``, make both durable, recover leftovers and prune.

    Raises:
        PublishFailed: a filesystem error (the temp directory is removed; older checkpoints stay).
    """
    try:
        files = dict(files)
        for entry in tmp.iterdir():  # anything written around the hashing stream (none in torch 2.13)
            if entry.name not in files and entry.is_file():
                files[entry.name] = {"size": entry.stat().st_size, Checksum.NAME: file_crc(entry)}
        manifest = {"format": SHARDED_FORMAT, "kind": "dcp", "step": step, "world_size": store.world_size,
                    "created": time.time(), "files": dict(sorted(files.items()))}
        # json.dumps without indent runs the C encoder; json.dump (and any indent) the pure-Python one.
        text = json.dumps(manifest, separators=(",", ":"))
        final = store.path_of(step)
        with open(tmp / MANIFEST, "w") as fh:
            fh.write(text)
            if final.exists():  # overwrite: the new manifest durable before the old copy is moved aside
                fh.flush()
                os.fsync(fh.fileno())
        if final.exists():
            store._discard(final, "old")
        os.rename(tmp, final)
        _fsync_file(final / MANIFEST)  # one journal commit: the manifest's bytes and the rename
        fsync_dir(store.directory)  # what POSIX asks for the rename (nothing left to commit on ext4)
        store._recover()  # removes the ".old" copy of an overwritten checkpoint
        store.prune()
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise PublishFailed(f"{type(exc).__name__}: {exc}") from None


def failure_text(exc: BaseException) -> str:
    """The first line of what failed in a DCP save: a :class:`PublishFailed` (rank 0's publication)
    when there is one, else the first rank's failure (DCP's ``CheckpointException.failures``)."""
    failures = getattr(exc, "failures", None) or {}
    inner = [f[0] if isinstance(f, tuple) else f for f in failures.values()]
    chosen = next((e for e in inner if isinstance(e, PublishFailed)), inner[0] if inner else exc)
    text = str(chosen).strip().splitlines()
    return text[0] if text else type(chosen).__name__
