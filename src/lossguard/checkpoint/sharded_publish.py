"""The end of a sharded save, on rank 0 inside DCP's ``finish``: manifest, rename, fsync, housekeeping.

:class:`~lossguard.checkpoint.sharded_writer.PublishingWriter` calls :func:`publish_files` on the
coordinator once every rank's shards are written and fsynced (DCP gathers the ranks' results
first: that gather is the barrier) and DCP's ``.metadata`` is written. Other ranks wait in DCP's
broadcast of the outcome meanwhile, so rank 0's housekeeping (``_recover``, ``prune``) still
finishes before any rank can start its next save and make the next temp directory.

What is fsynced, and why that is enough (a crash must never leave a checkpoint that ``restore()``
takes as valid when it is not; a published one must survive a power loss):

- every shard: by DCP itself (``sync_files=True``), as a plain ``dcp.save``;
- ``.metadata``, the manifest and the parent directory (for the rename), *after* the rename and
  all three at once, the calling thread taking one and a thread each the others
  (:func:`fsync_together`): independent fsyncs issued together let the filesystem's journal commit
  them in one transaction instead of one commit each (a ~4 ms wait each on this project's VM in
  session 7; in session 8 one commit was cheap, but in a row after a 192 MiB save they still cost
  more than together). The store used to pay four in a row beside DCP's own (rank file, manifest,
  temp directory, parent). Until they return, a power loss can leave the final
  name with a missing or empty manifest or ``.metadata``: that checkpoint is *invalid* (the listing
  requires a readable manifest whose sizes match, a load checks every checksum) and ``restore()``
  passes over it to the previous one, as if the save had not happened. A process kill in that
  window loses nothing: the page cache holds every byte. Pruning, the one step that deletes an
  older checkpoint, runs only after all three returned. The temp directory is not fsynced on its
  own: a file entry lost with it makes the checkpoint invalid (missing file), never wrongly valid.
- overwriting an existing checkpoint of the same step (a rare re-save) makes the new directory
  durable *before* the two renames, so ``_recover`` never drops the old copy for a new one whose
  files could still be lost.
"""
from __future__ import annotations

import json
import os
import shutil
import threading
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


def _fsync_path(path: Path, errors: list[OSError]) -> None:
    try:
        fsync_dir(path)  # an O_RDONLY descriptor fsyncs a file as well as a directory
    except OSError as exc:
        errors.append(exc)


def fsync_together(paths: list[Path]) -> None:
    """fsync every path (files or directories) at once and wait for all (see module): the calling
    thread takes the first, one short-lived thread each the others. Raises the first ``OSError``
    any of them met."""
    errors: list[OSError] = []
    threads = [threading.Thread(target=_fsync_path, args=(p, errors), name="lossguard-fsync") for p in paths[1:]]
    for thread in threads:
        thread.start()
    # The caller would only wait in join: its own fsync saves a thread's start and hand-over (rank 0
    # in finish, 48 / 192 MiB: 2.5 / 2.8 ms of CPU and 4.2 / 6.8 ms of wall with three threads, 2.5 /
    # 2.8 and 3.4 / 5.4 with two; all three in a row on the caller: 1.8 / 2.4 and 2.7 / 8.7 ms).
    for path in paths[:1]:
        _fsync_path(path, errors)
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


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
        # DCP fsynced the shards; what it wrote in finish (.metadata) is fsynced here with the rest.
        unsynced = [name for name in files if not name.endswith(".distcp")] + [MANIFEST]
        if final.exists():  # overwrite: the new checkpoint durable before the old copy is moved aside
            fsync_together([tmp / name for name in unsynced] + [tmp])
            store._discard(final, "old")
        os.rename(tmp, final)
        fsync_together([final / name for name in unsynced] + [store.directory])
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
