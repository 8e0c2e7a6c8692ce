"""Checking a file's checksum item by item from the reads DCP makes, in whatever order (issue 23).

``torch.load`` (which DCP runs on every storage item) reads an item out of order: the zip directory
at the item's end first, then small headers, then the tensor's bytes in one large read. Hashing a
whole file in order would cost a second pass over it. A CRC is a running value, though, so:

- while a file is written, the writer records *marks*: ``(position, CRC of the file up to there)``
  at every item boundary DCP asks for (its ``tell()`` before and after each item) and at both ends;
  the bytes between two marks are right when the CRC continued from the first mark's value over
  them gives the second mark's value;
- before a file is read, DCP's load plan says which items it will read (:class:`VerifyingReader`
  in :mod:`.dcp_io` hands them over); each becomes a *span* between the marks around it, with a
  cursor at the span's start and the start mark's CRC;
- :class:`TrackingReader` hashes each large read (a tensor's bytes) as it happens, 256 KiB at a time
  while the bytes are in cache: the bytes between the span's cursor and the read (zip headers, a
  few hundred bytes, still in the page cache) are re-read by ``pread`` and hashed first, so the CRC
  runs over the span in order and no CRC needs combining; small reads pass straight to the file;
- when the file is closed, :meth:`TrackingReader.verify` hashes what is left of each span (the zip
  directory at its end, small items) and compares with the end mark. Tensor bytes are read and
  hashed once, and a file read outside a plan (DCP's ``.metadata``) is one span, the whole file.

A read outside every planned item is not hashed, and need not be: ``torch.load`` reads an item
through a view of exactly that item's bytes, so it reads elsewhere only when those bytes are
damaged, and then the item's own span fails.
"""
from __future__ import annotations

import io
import os
from bisect import bisect_left, bisect_right
from typing import Any

from .files import Checksum, ChecksumMismatch

_BLOCK = 1 << 18  # bytes read and hashed at a time: the block and its page-cache source fit in L2
_LARGE = 1 << 16  # reads from this size on are hashed as they happen; smaller ones re-read by pread
_LABELS = {"crc32": "CRC-32", "crc32c": "CRC-32C"}


def _pread_into(extend: Any, value: int, fd: int, offset: int, length: int) -> int:
    """``value`` extended (``extend``: :meth:`Checksum.extender`) over ``length`` bytes at ``offset``
    (bytes not hashed while read), read 4 MiB at a time."""
    while length > 0:
        data = os.pread(fd, min(length, 1 << 22), offset)
        if not data:
            return value  # the file is shorter than the marks: the CRC will not match
        value = extend(data, value)
        offset += len(data)
        length -= len(data)
    return value


def spans_of(name: str, marks: list[list[int]], planned: list[tuple[int, int]] | None,
             fd: int) -> list[tuple[int, int]]:
    """The mark-index pairs ``(a, b)`` around each planned read ``(offset, length)``, sorted, those
    that overlap merged; the whole file (first to last mark) when nothing is planned.

    Items are not merged when they merely touch: each is hashed in order on its own, so one read
    out of file order costs no re-read of the items before it.

    Raises:
        ChecksumMismatch: a planned read falls outside the marked file.
    """
    if planned is None:
        return [(0, len(marks) - 1)]
    positions = [m[0] for m in marks]
    pairs = set()
    for offset, length in planned:
        a = bisect_right(positions, offset) - 1  # the mark at or before the read
        b = bisect_left(positions, offset + length)  # the mark at or after its end
        if a < 0 or b >= len(positions):
            raise ChecksumMismatch(f"{name} has {os.fstat(fd).st_size} bytes, the manifest recorded {positions[-1]}")
        pairs.add((a, max(a, b)))
    merged: list[tuple[int, int]] = []
    for a, b in sorted(pairs):
        if merged and a < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


class TrackingReader(io.RawIOBase):
    """A read-only, seekable view of an open binary file that hashes, span by span, the items DCP
    reads from it (see module), and checks them against their marks on :meth:`verify`.

    ``seek``, ``tell`` and ``fileno`` are the file's own (no Python frame: ``torch.load`` makes
    ~25 seeks and tells per item), and ``readinto`` and ``read`` are closures that pass small reads
    straight on: a frame and a size test per small read is all the tracking costs there.
    """

    def __init__(self, raw: Any, algorithm: type[Checksum], name: str, marks: list[list[int]],
                 planned: list[tuple[int, int]] | None = None) -> None:
        super().__init__()
        self.raw, self.name = raw, name
        fd = raw.fileno()
        extend = algorithm.extender()
        # [start, end, cursor, CRC of the file up to the cursor, CRC the end mark records]
        spans = [[marks[a][0], marks[b][0], marks[a][0], marks[a][1], marks[b][1]]
                 for a, b in spans_of(name, marks, planned, fd)]
        starts = [s[0] for s in spans]
        self.spans = spans
        self._extend, self._fd = extend, fd
        raw_readinto, raw_read, raw_tell = raw.readinto, raw.read, raw.tell

        def consume(pos: int, data: Any) -> None:
            """Hash the bytes ``data`` read at ``pos`` into every span they reach, in order."""
            end_of_read = pos + len(data)
            i = max(bisect_right(starts, pos) - 1, 0)
            while i < len(spans) and spans[i][0] < end_of_read:
                span = spans[i]
                i += 1
                end, cursor, value = span[1], span[2], span[3]
                if end <= pos or cursor >= end_of_read:
                    continue  # before the read, or already hashed this far
                if pos > cursor:  # headers between the cursor and this read: in the page cache
                    value = _pread_into(extend, value, fd, cursor, pos - cursor)
                    cursor = pos
                stop = min(end_of_read, end)
                span[2], span[3] = stop, extend(data[cursor - pos:stop - pos], value)

        def readinto(buffer: Any) -> int:
            if len(buffer) < _LARGE:
                return raw_readinto(buffer)
            view = memoryview(buffer).cast("B")
            pos, total = raw_tell(), len(view)
            i = bisect_right(starts, pos) - 1
            span = spans[i] if i >= 0 else None
            # A tensor's bytes come in one read of many MiB: read and hash them a block at a time,
            # so the CRC runs over bytes still in cache instead of a second trip through memory.
            done = 0
            if span is not None and span[2] <= pos and pos + total <= span[1]:
                value = span[3]  # the usual case: the read lies in one span, at or after its cursor
                if pos > span[2]:
                    value = _pread_into(extend, value, fd, span[2], pos - span[2])
                while done < total:
                    block = view[done:done + _BLOCK]
                    n = raw_readinto(block)
                    value = extend(block if n == len(block) else block[:n], value)
                    done += n
                    if n < len(block):
                        break  # end of file
                span[2], span[3] = pos + done, value
                return done
            while done < total:  # re-read, or across spans: each block where it belongs
                block = view[done:done + _BLOCK]
                n = raw_readinto(block)
                consume(pos + done, block[:n])
                done += n
                if n < len(block):
                    break  # end of file
            return done

        def read(size: int | None = -1) -> bytes:
            pos = raw_tell()
            data = raw_read(size)
            if len(data) >= _LARGE:
                consume(pos, memoryview(data))
            return data

        # Instance attributes shadow the class's methods: see the class docstring.
        self.readinto = readinto  # type: ignore[method-assign]
        self.read = read  # type: ignore[method-assign]
        self.seek = raw.seek  # type: ignore[method-assign]
        self.tell = raw_tell  # type: ignore[method-assign]
        self.fileno = raw.fileno  # type: ignore[method-assign]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def verify(self, algo: str) -> None:
        """Hash what was not read of every span and check each against its end mark.

        Raises:
            ChecksumMismatch: a span's bytes do not have the CRC the marks give it (named as
                corrupted, ``algo`` the manifest's name of the checksum).
        """
        for _start, end, cursor, value, expected in self.spans:
            if _pread_into(self._extend, value, self._fd, cursor, end - cursor) != expected:
                label = _LABELS.get(algo, algo)  # the zip directory, small items: re-read above
                raise ChecksumMismatch(f"{self.name} does not match its {label} in manifest.json (corrupted)")
