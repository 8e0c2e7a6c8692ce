"""DCP storage that checksums what it writes and verifies what it reads, each byte touched once.

The sharded store used to checksum a checkpoint by reading every file back after DCP wrote it, and
to verify one by reading every file before DCP read it again: a sync save cost 1.4-2.5x plain DCP
and a load 1.5-2.1x (issue 23). Here the checksum rides on DCP's own I/O instead:

- :class:`HashingFileSystem` is DCP's ``FileSystem`` whose write streams hash the bytes on their
  way to disk (the fastest checksum installed: CRC-32 through zlib-ng, else CRC-32C through
  ``google-crc32c``, else the stdlib's CRC-32; :func:`lossguard.checkpoint.files.fast_checksum`)
  and record ``{name: {"size", algorithm: hex}}``
  per file, ``.metadata`` included (its temp name's entry follows DCP's rename), plus ``marks``:
  the running CRC at every position DCP asks ``tell()`` for -- before and after each storage item,
  the ranges its metadata records and its reads come back by;
- :class:`VerifyingReader` is DCP's ``FileSystemReader`` that tells its :class:`VerifyingFileSystem`
  which items the load plan reads from each file; the file system hands DCP a
  :class:`~lossguard.checkpoint.crc_ranges.TrackingReader` that hashes each item's tensor bytes as
  they are read (``torch.load`` reads an item out of order: zip directory first, tensor bytes
  last) and, when DCP closes the file, hashes the rest of each item and checks it against its marks
  (:meth:`~lossguard.checkpoint.crc_ranges.TrackingReader.verify`): every tensor byte is read and
  hashed once. If DCP fails on a file, the whole file is checked, so damage is named as damage.
  DCP loads in place, so a damaged item can leave the tensors read before it loaded (the store's
  ``load(None)`` then loads an older checkpoint over them; an explicit step raises).
- A checkpoint written before marks existed (entries with size and checksum only) is verified as
  it used to be: one pass over each file before DCP reads it again from the page cache.

Both plug into the stock ``FileSystemWriter`` / ``FileSystemReader`` (their ``fs`` attribute; the
reader also hands its load plan to its file system, nothing more): DCP's planning, file layout and
metadata are untouched, so a checkpoint stays loadable by plain ``dcp.load``.
"""
from __future__ import annotations

import io
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .crc_ranges import TrackingReader
from .files import CHECKSUMS, Checksum, ChecksumMismatch

_BLOCK = 1 << 19  # bytes hashed then written at a time (see _HashingStream)

__all__ = ["HashingFileSystem", "VerifyingFileSystem", "VerifyingReader", "ChecksumMismatch", "hashing_writer",
           "verifying_reader"]


class _HashingStream(io.RawIOBase):
    """A write-only stream that hashes and counts every byte before passing it on.

    ``torch.save`` (which DCP runs per tensor item) writes a shard in ~40 calls per item, mostly
    zip headers of a few dozen bytes: the wrapper's own cost per call was ~2/3 of the hashing's
    extra save time (issue 23). So ``write`` is a closure bound on the instance (no attribute look-ups,
    no method frame for the checksum, no ``memoryview`` cast: torch and DCP hand byte buffers, and
    the CRC and the file both take any contiguous buffer); the running value and size live in its
    cells and are read through :attr:`value` and :attr:`size`.

    A large write (a tensor's bytes: 2 MiB per storage at 48 MiB) is hashed and written 512 KiB at a
    time: the CRC reads each block from memory and the write's copy into the page cache finds it
    still in L2 (block and destination fit a 1 MiB L2), where hashing the whole buffer first made the
    copy read it from memory again. Replaying a 48 MiB shard's writes (benchmarks/checkpoint_write_replay.py):
    the CRC in one call per write cost +4.2 ms of CPU over the raw file, in 512 KiB or 1 MiB blocks
    +3.4 ms, in 256 KiB blocks +4.0 ms (twice the write calls).
    """

    def __init__(self, raw, algorithm: type[Checksum]) -> None:
        super().__init__()
        self.raw = raw
        extend, raw_write = algorithm.extender(), raw.write
        state = [algorithm().value, 0]  # running checksum, bytes written

        def write(data) -> int:
            if len(data) <= _BLOCK:  # zip headers, small items: one call each, no slicing
                state[0] = extend(data, state[0])
                n = raw_write(data)
                state[1] += n
                return n
            view = memoryview(data).cast("B")  # torch hands contiguous buffers; cast counts bytes
            n = 0
            for start in range(0, len(view), _BLOCK):
                block = view[start:start + _BLOCK]
                state[0] = extend(block, state[0])
                n += raw_write(block)
            state[1] += n
            return n

        self.write = write  # type: ignore[method-assign]  # shadows the class's, see above
        self._state = state
        self.marks: dict[int, int] = {0: state[0]}  # position -> CRC of the file up to it

    @property
    def value(self) -> int:
        """The checksum of the bytes written so far."""
        return self._state[0]

    @property
    def size(self) -> int:
        """The number of bytes written so far."""
        return self._state[1]

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        # DCP asks before and after each item it writes: exactly the boundaries a load reads by.
        self.marks[self._state[1]] = self._state[0]
        return self.raw.tell()

    def fileno(self) -> int:
        return self.raw.fileno()

    def flush(self) -> None:
        self.raw.flush()


def _fs_bases():
    from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemReader

    return FileSystem, FileSystemReader


if TYPE_CHECKING:
    from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemReader
else:
    FileSystem, FileSystemReader = _fs_bases()  # torch imported here, when the checkpoint path needs it


class HashingFileSystem(FileSystem):
    """DCP's local ``FileSystem``; every file written through it is hashed on the way (see module)."""

    def __init__(self, algorithm: type[Checksum]) -> None:
        super().__init__()
        self.algorithm = algorithm
        self.table: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()  # DCP may write several files from several threads

    @contextmanager
    def create_stream(self, path, mode: str):
        if "w" not in mode:
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        with Path(path).open(mode) as raw:
            stream = _HashingStream(raw, self.algorithm)
            yield stream
        stream.marks[stream.size] = stream.value
        with self._lock:
            self.table[Path(path).name] = {"size": stream.size, self.algorithm.NAME: f"{stream.value:08x}",
                                           "marks": sorted([pos, crc] for pos, crc in stream.marks.items())}

    def rename(self, path, new_path) -> None:
        super().rename(path, new_path)
        with self._lock:
            entry = self.table.pop(Path(path).name, None)
            if entry is not None:
                self.table[Path(new_path).name] = entry


class VerifyingFileSystem(FileSystem):
    """DCP's local ``FileSystem`` that checks each file it opens for reading against ``expected``."""

    def __init__(self, expected: dict[str, dict[str, Any]]) -> None:
        super().__init__()
        self.expected = expected
        # file name -> (offset, length) of each item the load plan reads from it (VerifyingReader);
        # a file without a plan (DCP's .metadata) is checked whole.
        self.planned: dict[str, list[tuple[int, int]]] = {}

    def plan_reads(self, items: Any, storage_data: dict[Any, Any]) -> None:
        """Note where each of a load plan's ``items`` lies (``storage_data``: DCP's storage index
        -> ``_StorageInfo``), so a file's check covers just the items read from it."""
        by_path: dict[str, list[tuple[int, int]]] = {}
        for item in items:
            info = storage_data[item.storage_index]
            by_path.setdefault(info.relative_path, []).append((info.offset, info.length))
        self.planned = {os.path.basename(path): reads for path, reads in by_path.items()}

    @contextmanager
    def create_stream(self, path, mode: str):
        entry = self.expected.get(Path(path).name)
        if "r" not in mode or entry is None:
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        name = Path(path).name
        if "marks" not in entry:  # written before item marks (lossguard <= session 4): a pass first
            with open(path, "rb") as fh:
                check_stream(fh, name, entry)  # one pass in 4 MiB blocks, then DCP reads it
                fh.seek(0)                     # again (from the page cache): no big buffer
                yield fh
            return
        algo, cls = _algorithm(name, entry)
        with open(path, "rb") as fh:
            reader = TrackingReader(fh, cls, name, entry["marks"], self.planned.get(name))
            try:
                yield reader
            except BaseException:
                fh.seek(0)  # DCP failed on this file: a damaged file is named as such, not as DCP's error
                check_stream(fh, name, entry)
                raise
            reader.verify(algo)


class VerifyingReader(FileSystemReader):
    """DCP's ``FileSystemReader`` that verifies every file it reads against ``expected`` (a
    manifest's ``files``; None: no checks), each file's check limited to the items its load plan
    reads (see module)."""

    def __init__(self, path: os.PathLike, expected: dict[str, dict[str, Any]] | None = None) -> None:
        super().__init__(path)
        if expected is not None:
            self.fs = VerifyingFileSystem(expected)

    def read_data(self, plan: Any, planner: Any) -> Any:
        if isinstance(self.fs, VerifyingFileSystem):
            self.fs.plan_reads(plan.items, self.storage_data)
        return super().read_data(plan, planner)


def _algorithm(name_of_file: str, entry: dict[str, Any]) -> tuple[str, type[Checksum]]:
    name = next((n for n in CHECKSUMS if n in entry), None)
    if name is None:
        raise ChecksumMismatch(f"{name_of_file}: the manifest records no checksum this lossguard knows")
    return name, CHECKSUMS[name]


def _check(name_of_file: str, entry: dict[str, Any], size: int, algo: str, crc: Checksum) -> None:
    if size != entry.get("size"):
        raise ChecksumMismatch(f"{name_of_file} has {size} bytes, the manifest recorded {entry.get('size')}")
    if crc.hexdigest() != entry[algo]:
        label = {"crc32": "CRC-32", "crc32c": "CRC-32C"}.get(algo, algo)
        raise ChecksumMismatch(f"{name_of_file} does not match its {label} in manifest.json (corrupted)")


def check_stream(fh, name_of_file: str, entry: dict[str, Any]) -> None:
    """Read an open binary file to its end in 4 MiB blocks (one reused buffer) and check it against
    a manifest entry. Raises :class:`ChecksumMismatch`."""
    algo, cls = _algorithm(name_of_file, entry)
    crc, size = cls(), 0
    buf = bytearray(1 << 22)
    view = memoryview(buf)
    while True:
        n = fh.readinto(buf)
        if not n:
            break
        crc.update(view[:n])
        size += n
    _check(name_of_file, entry, size, algo, crc)


def read_verified(path: Path, entry: dict[str, Any]) -> bytes:
    """The file's bytes, read once, after checking size and checksum against a manifest entry.

    Raises:
        ChecksumMismatch: wrong size, unknown algorithm or wrong checksum.
    """
    with open(path, "rb") as fh:
        data = fh.read()
    algo, cls = _algorithm(path.name, entry)
    crc = cls()
    crc.update(data)
    _check(path.name, entry, len(data), algo, crc)
    return data


def hashing_writer(path: os.PathLike, algorithm: type[Checksum]):
    """A ``FileSystemWriter`` for ``path`` whose files are hashed while written; ``writer.fs.table``
    holds the results once the save is done."""
    from torch.distributed.checkpoint import FileSystemWriter

    writer = FileSystemWriter(path)
    writer.fs = HashingFileSystem(algorithm)
    return writer


def verifying_reader(path: os.PathLike, expected: dict[str, dict[str, Any]]):
    """A ``FileSystemReader`` for ``path`` that verifies every file it reads against ``expected``."""
    return VerifyingReader(path, expected)
