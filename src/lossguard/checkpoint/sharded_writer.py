"""The sharded store's DCP writer: hashes while writing, and publishes inside DCP's own finish step.

A sharded save used to run its own end game after ``dcp.save`` returned: every rank wrote and
fsynced a ``rank-NNNNN.pt``, the file tables were gathered on rank 0 (one collective), rank 0 wrote
the manifest and renamed the directory, and the outcome was broadcast (a second collective). On a
48 MiB checkpoint that fixed work cost ~13 ms of a ~63 ms save (issue 23). DCP already has the
collective it needs: every rank's ``write_data`` results are gathered on the coordinator, which
calls ``finish`` and broadcasts its outcome (an exception raised there reaches every rank). So:

- each rank's file table (size, checksum and item marks of every file it wrote, hashed on the way
  by :class:`~lossguard.checkpoint.dcp_io.HashingFileSystem`) rides to rank 0 inside the first of
  its ``WriteResult``s (:class:`FileTable` wraps that result's ``storage_data``);
- :meth:`PublishingWriter.finish` on rank 0 unwraps them (``.metadata`` holds DCP's own storage
  info only, so plain ``dcp.load`` still reads the checkpoint), lets DCP write ``.metadata``, and
  calls the store's ``publish`` with every file's entry: manifest, rename, fsync. A failure there
  raises on every rank through DCP's broadcast.

The per-rank state (RNG, data position, ...) is no separate file any more: the store hands it to
DCP as one ``bytes`` item per rank, so it lands in the rank's shard file, hashed, marked and fsynced
with it (:mod:`.sharded`).
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .dcp_io import HashingFileSystem
from .files import Checksum


@dataclasses.dataclass
class FileTable:
    """A ``WriteResult.storage_data`` with this rank's file table attached on its way to rank 0.

    Attributes:
        storage_data: DCP's own storage info of the item (put back before ``.metadata`` is written).
        files: ``{file name: {"size", checksum name: hex, "marks"}}`` of the files this rank wrote.
    """

    storage_data: Any
    files: dict[str, dict[str, Any]]


def _writer_base():
    from torch.distributed.checkpoint import FileSystemWriter

    return FileSystemWriter


if TYPE_CHECKING:
    from torch.distributed.checkpoint import FileSystemWriter
else:
    FileSystemWriter = _writer_base()  # torch imported here, when a save needs it


class PublishingWriter(FileSystemWriter):
    """``FileSystemWriter`` (fsyncs every shard it writes, as plain DCP does) that hashes every file
    and, on the coordinator, hands all ranks' file tables to ``publish`` once ``.metadata`` is
    written; ``publish`` fsyncs ``.metadata`` (with the manifest and the rename, all at once).

    Args:
        path: the temp directory DCP writes into.
        algorithm: the checksum class (:func:`lossguard.checkpoint.files.fast_checksum`).
        publish: called on the coordinator with ``{file name: entry}`` of every file of the
            checkpoint (``.metadata`` included); an exception it raises fails the save on every rank.
    """

    def __init__(self, path: str | os.PathLike, algorithm: type[Checksum],
                 publish: Callable[[dict[str, dict[str, Any]]], None]) -> None:
        super().__init__(path)
        self.hashing = HashingFileSystem(algorithm)
        self.fs = self.hashing
        self._publish = publish

    def write_data(self, plan: Any, planner: Any) -> Any:
        from torch.futures import Future

        results = list(super().write_data(plan, planner).value())
        if results:  # a rank that wrote nothing has no file to report
            first = results[0]
            table = FileTable(first.storage_data, dict(self.hashing.table))
            results[0] = dataclasses.replace(first, storage_data=table)
        done: Future = Future()
        done.set_result(results)
        return done

    def finish(self, metadata: Any, results: list[list[Any]]) -> None:
        files: dict[str, dict[str, Any]] = {}
        plain = []
        for rank_results in results:
            unwrapped = []
            for result in rank_results:
                if isinstance(result.storage_data, FileTable):
                    files.update(result.storage_data.files)
                    result = dataclasses.replace(result, storage_data=result.storage_data.storage_data)
                unwrapped.append(result)
            plain.append(unwrapped)
        # .metadata is fsynced by publish, at once with the manifest and the rename (sharded_publish).
        sync, self.sync_files = self.sync_files, False
        try:
            super().finish(metadata=metadata, results=plain)
        finally:
            self.sync_files = sync
        files.update(self.hashing.table)  # .metadata, just written (hashed, fsynced, renamed into place)
        self._publish(files)
