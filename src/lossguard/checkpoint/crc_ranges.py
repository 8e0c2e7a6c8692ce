"""Checking a file's checksum from the pieces a reader happened to read, in whatever order (issue 23).

``torch.load`` (which DCP runs on every storage item) reads a shard out of order: the zip directory
at the end first, then small headers, then each tensor's bytes in one large read. Hashing a whole
file in order therefore costs a second pass over it. A CRC is linear, though: the CRC of ``A || B``
follows from the CRCs of ``A`` and ``B`` and the length of ``B`` (``crc(A||B) = x^(8|B|) * crc(A) +
crc(B)`` modulo the polynomial; the algebra zlib's ``crc32_combine`` rests on). So:

- while a file is written, the writer records *marks*: ``(position, CRC of the file up to there)``
  at every item boundary DCP asks for (its ``tell()`` before and after each item) and at both ends;
  the CRC of any range between two marks follows from the two marks alone;
- while it is read, :class:`TrackingReader` records ``(offset, length, CRC)`` for each read (a read
  that continues the previous one extends it);
- when the file is closed, :func:`verify_reads` checks every mark-to-mark range that any read
  touched: the CRCs of the reads are combined in offset order, the few bytes nobody read (zip
  padding, skipped headers; re-read by ``pread``) fill the gaps, and the result must equal the
  range's CRC from the marks. Every large byte is hashed once, as it is read.
"""
from __future__ import annotations

import io
import os
from bisect import bisect_left, bisect_right
from functools import lru_cache
from typing import Any

from .files import Checksum, ChecksumMismatch

POLYNOMIALS = {"crc32": 0xEDB88320, "crc32c": 0x82F63B78}
"""Reflected generator polynomials by the name a manifest records a checksum under."""

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
    """A read-only, seekable view of an open binary file that hashes every read as it happens and
    records ``[offset, length, running checksum]`` per run of contiguous reads."""

    def __init__(self, raw: Any, algorithm: type[Checksum]) -> None:
        super().__init__()
        self.raw, self.algorithm, self.pos = raw, algorithm, 0
        self.reads: list[list[Any]] = []

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
        n = self.raw.readinto(view) or 0
        self._record(view[:n])
        return n

    def read(self, size: int | None = -1) -> bytes:
        data = self.raw.read(size)
        self._record(data)
        return data

    def _record(self, data: Any) -> None:
        n = len(data)
        if not n:
            return
        last = self.reads[-1] if self.reads else None
        if last is not None and last[0] + last[1] == self.pos:  # continues the previous read
            last[2].update(data)
            last[1] += n
        else:
            crc = self.algorithm()
            crc.update(data)
            self.reads.append([self.pos, n, crc])
        self.pos += n


def _pread_crc(fd: int, offset: int, length: int, algorithm: type[Checksum]) -> int:
    """The checksum of ``length`` bytes at ``offset`` (bytes the reader skipped), read in 4 MiB blocks."""
    crc = algorithm()
    while length > 0:
        data = os.pread(fd, min(length, 1 << 22), offset)
        if not data:
            break  # the file is shorter than the marks: the CRC will not match
        crc.update(data)
        offset += len(data)
        length -= len(data)
    return crc.value


def verify_reads(name: str, algo: str, marks: list[list[int]], reads: list[list[Any]], fd: int,
                 algorithm: type[Checksum]) -> None:
    """Check every mark-to-mark range of file ``name`` that ``reads`` touched (see module).

    Raises:
        ChecksumMismatch: a range's bytes do not have the CRC the marks give it, or a read fell
            outside the marked file.
    """
    poly = POLYNOMIALS[algo]
    label = {"crc32": "CRC-32", "crc32c": "CRC-32C"}.get(algo, algo)
    positions = [m[0] for m in marks]
    spans: list[list[int]] = []
    for off, n, _ in sorted(reads, key=lambda r: r[0]):
        a, b = bisect_right(positions, off) - 1, bisect_left(positions, off + n)
        if a < 0 or b >= len(positions):
            raise ChecksumMismatch(f"{name} has bytes past the {positions[-1]} the manifest recorded")
        if spans and a <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], b)
        else:
            spans.append([a, b])
    ordered = sorted(reads, key=lambda r: r[0])
    i = 0
    for a, b in spans:
        start, end = positions[a], positions[b]
        acc, cur = 0, start
        while i < len(ordered) and ordered[i][0] < end:
            off, n, crc = ordered[i]
            i += 1
            if off > cur:  # bytes nobody read: a zip header's padding, a skipped field
                acc, cur = combine(acc, _pread_crc(fd, cur, off - cur, algorithm), off - cur, poly), off
            if off == cur:
                acc, cur = combine(acc, crc.value, n, poly), cur + n
            elif off + n > cur:  # overlaps what is already hashed: hash only the new tail, again
                acc = combine(acc, _pread_crc(fd, cur, off + n - cur, algorithm), off + n - cur, poly)
                cur = off + n
        if cur < end:
            acc = combine(acc, _pread_crc(fd, cur, end - cur, algorithm), end - cur, poly)
        if acc != range_crc(tuple(marks[a]), tuple(marks[b]), poly):  # type: ignore[arg-type]
            raise ChecksumMismatch(f"{name} does not match its {label} in manifest.json (corrupted)")
