"""Checking a file's checksum from the pieces a reader happened to read, in whatever order (issue 23).

``torch.load`` (which DCP runs on every storage item) reads a shard out of order: the zip directory
at the end first, then small headers, then each tensor's bytes in one large read. Hashing a whole
file in order therefore costs a second pass over it. A CRC is linear, though: the CRC of ``A || B``
follows from the CRCs of ``A`` and ``B`` and the length of ``B`` (``crc(A||B) = x^(8|B|) * crc(A) +
crc(B)`` modulo the polynomial; the algebra zlib's ``crc32_combine`` rests on). So:

- while a file is written, the writer records *marks*: ``(position, CRC of the file up to there)``
  at every item boundary DCP asks for (its ``tell()`` before and after each item) and at both ends;
  the CRC of any range between two marks follows from the two marks alone;
- while it is read, :class:`TrackingReader` hashes each large read (a tensor's bytes) as it
  happens, 1 MiB at a time while the bytes are in cache, and notes where every read went;
- when the file is closed, :func:`verify_reads` checks every mark-to-mark range that any read
  touched: the CRCs of the large reads are combined in offset order, the bytes between them (zip
  headers, padding, small items; re-read by ``pread``, a few KiB per item) fill the gaps, and the
  result must equal the range's CRC from the marks. Tensor bytes are read and hashed once.
"""
from __future__ import annotations

import io
import os
from functools import lru_cache
from typing import Any

from .files import Checksum, ChecksumMismatch

POLYNOMIALS = {"crc32": 0xEDB88320, "crc32c": 0x82F63B78}
"""Reflected generator polynomials by the name a manifest records a checksum under."""

_BLOCK = 1 << 20  # bytes read and hashed at a time: still in cache when hashed
_LARGE = 1 << 16  # reads from this size on are hashed as they happen; smaller ones re-read at the end
_ONE = 1 << 31  # the polynomial 1 (x^0) in the reflected bit order


def _multiply(a: int, b: int, poly: int) -> int:
    """``a * b`` modulo ``poly``, both in the reflected bit order (bit 31 is x^0)."""
    product = 0
    for bit in range(31, -1, -1):
        if a >> bit & 1:
            product ^= b
        b = (b >> 1) ^ poly if b & 1 else b >> 1
    return product


@lru_cache(maxsize=None)
def _x_power_of_two(k: int, poly: int) -> int:
    """x^(2^k) modulo ``poly``."""
    if k == 0:
        return 1 << 30  # x^1
    half = _x_power_of_two(k - 1, poly)
    return _multiply(half, half, poly)


@lru_cache(maxsize=4096)
def _shift_operator(nbytes: int, poly: int) -> int:
    """x^(8 * nbytes) modulo ``poly``: appending ``nbytes`` to a message multiplies its CRC by this
    (lengths repeat -- zip headers, equal tensors -- so the result is cached)."""
    result, k = _ONE, 3
    while nbytes:
        if nbytes & 1:
            result = _multiply(_x_power_of_two(k, poly), result, poly)
        nbytes >>= 1
        k += 1
    return result


def combine(crc_a: int, crc_b: int, len_b: int, poly: int) -> int:
    """The CRC of ``A || B`` from the CRC of ``A``, the CRC of ``B`` and the length of ``B``."""
    return _multiply(_shift_operator(len_b, poly), crc_a, poly) ^ crc_b if len_b else crc_a


def range_crc(start: tuple[int, int], end: tuple[int, int], poly: int) -> int:
    """The CRC of the bytes between two marks ``(position, CRC of the file up to it)``."""
    return end[1] ^ _multiply(_shift_operator(end[0] - start[0], poly), start[1], poly)


class TrackingReader(io.RawIOBase):
    """A read-only, seekable view of an open binary file that notes where every read went and
    hashes the large ones (a tensor's bytes) as they happen.

    ``touched`` holds ``(offset, length)`` of every read; ``hashed`` holds ``[offset, length,
    checksum]`` per run of contiguous large reads. Small reads (zip headers, the pickle, the zip
    directory: a few hundred bytes each) are not hashed here: :func:`verify_reads` re-reads the
    bytes between large runs in one ``pread`` per gap, cheaper than a CRC combine per small read.
    """

    def __init__(self, raw: Any, algorithm: type[Checksum]) -> None:
        super().__init__()
        self.raw, self.algorithm, self.pos = raw, algorithm, 0
        self.touched: list[tuple[int, int]] = []
        self.hashed: list[list[Any]] = []

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET, /) -> int:
        self.pos = self.raw.seek(offset, whence)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def fileno(self) -> int:
        return self.raw.fileno()

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if len(view) < _LARGE:
            n = self.raw.readinto(view) or 0
            self._note(n)
            return n
        done = 0
        # A tensor's bytes come in one read of many MiB: read and hash them a block at a time,
        # so the CRC runs over bytes still in cache instead of a second trip through memory.
        while done < len(view):
            n = self.raw.readinto(view[done:done + _BLOCK]) or 0
            self._hash(view[done:done + n])
            done += n
            if n < min(_BLOCK, len(view) - done + n):
                break
        return done

    def read(self, size: int | None = -1) -> bytes:
        data = self.raw.read(size)
        if len(data) < _LARGE:
            self._note(len(data))
        else:
            self._hash(data)
        return data

    def _note(self, n: int) -> None:
        if n:
            self.touched.append((self.pos, n))
            self.pos += n

    def _hash(self, data: Any) -> None:
        n = len(data)
        if not n:
            return
        last = self.hashed[-1] if self.hashed else None
        if last is not None and last[0] + last[1] == self.pos:  # continues the previous read
            last[2].update(data)
            last[1] += n
        else:
            crc = self.algorithm()
            crc.update(data)
            self.hashed.append([self.pos, n, crc])
        self.touched.append((self.pos, n))
        self.pos += n


def _pread_into(crc: Checksum, fd: int, offset: int, length: int) -> None:
    """Hash ``length`` bytes at ``offset`` (bytes not hashed while read) into ``crc``, 4 MiB at a time."""
    while length > 0:
        data = os.pread(fd, min(length, 1 << 22), offset)
        if not data:
            return  # the file is shorter than the marks: the CRC will not match
        crc.update(data)
        offset += len(data)
        length -= len(data)


def _spans(name: str, positions: list[int], touched: list[tuple[int, int]], fd: int) -> list[tuple[int, int]]:
    """The mark-index ranges ``(a, b)`` that cover every read, merged where they overlap or touch.

    Vectorised: ``torch.load`` makes ~20 small reads per item (720 for a 48-item shard), and a
    Python loop with two bisections per read cost ~1 ms per shard (issue 23)."""
    import numpy as np

    if not touched:
        return []
    reads = np.array(touched, dtype=np.int64)
    marks = np.array(positions, dtype=np.int64)
    first = np.searchsorted(marks, reads[:, 0], side="right") - 1  # the mark at or before each read
    last = np.searchsorted(marks, reads[:, 0] + reads[:, 1], side="left")  # the mark at or after its end
    if first.min() < 0 or last.max() >= len(positions):
        raise ChecksumMismatch(f"{name} has {os.fstat(fd).st_size} bytes, the manifest recorded {positions[-1]}")
    order = np.argsort(first, kind="stable")
    first, last = first[order], np.maximum.accumulate(last[order])  # how far the spans so far reach
    opens = np.flatnonzero(np.concatenate(([True], first[1:] > last[:-1])))  # a read past that reach
    ends = np.concatenate((opens[1:] - 1, [len(first) - 1]))
    return list(zip(first[opens].tolist(), last[ends].tolist(), strict=True))


def verify_reads(name: str, algo: str, marks: list[list[int]], reader: TrackingReader, fd: int) -> None:
    """Check every mark-to-mark range of file ``name`` that ``reader`` read from (see module).

    Raises:
        ChecksumMismatch: a range's bytes do not have the CRC the marks give it, or a read fell
            outside the marked file.
    """
    poly = POLYNOMIALS[algo]
    label = {"crc32": "CRC-32", "crc32c": "CRC-32C"}.get(algo, algo)
    positions = [m[0] for m in marks]
    hashed = sorted(reader.hashed, key=lambda r: r[0])
    i = 0
    for a, b in _spans(name, positions, reader.touched, fd):
        start, end = positions[a], positions[b]
        acc, cur = reader.algorithm(), start
        while i < len(hashed) and hashed[i][0] < end:
            off, n, crc = hashed[i]
            i += 1
            if off < cur:  # read twice: the bytes past cur are re-read with the next gap
                continue
            _pread_into(acc, fd, cur, off - cur)  # headers, padding, small items
            acc.value = combine(acc.value, crc.value, n, poly)
            cur = off + n
        _pread_into(acc, fd, cur, end - cur)
        if acc.value != range_crc((marks[a][0], marks[a][1]), (marks[b][0], marks[b][1]), poly):
            raise ChecksumMismatch(f"{name} does not match its {label} in manifest.json (corrupted)")
