"""TFRecord framing and CRC32C, checked for every record at numpy speed.

A TFRecord file (the container of TensorBoard event files) is a sequence of records::

    uint64 length            little-endian
    uint32 masked_crc32c(length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

with ``masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8`` (mod 2**32), as defined by
TensorFlow's ``tensorflow/core/lib/hash/crc32c.h``. CRC32C is the Castagnoli CRC (reflected
polynomial 0x82F63B78).

Framing is inherently sequential (each record's offset depends on the previous length), so one
minimal Python loop finds the offsets; everything else — both CRCs of every record — is computed
with array operations over groups of records that have the same length (a scalar writer produces
only a handful of lengths). This needs only numpy, so the reader works without ``google-crc32c``
and is faster than calling a C CRC once per record.
"""
from __future__ import annotations

from dataclasses import dataclass
from struct import Struct

import numpy as np

_POLY = 0x82F63B78
_MASK_DELTA = 0xA282EAD8
_U64 = Struct("<Q")
HEADER = 12
"""Bytes before the data of a record: the length and its CRC."""
FOOTER = 4
"""Bytes after the data of a record: the CRC of the data."""


def _make_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1).astype(np.uint32)
    return table


_TABLE = _make_table()
_TABLE_LIST = [int(x) for x in _TABLE]


def crc32c(data: bytes) -> int:
    """CRC32C of ``data`` (pure Python; for short inputs such as a sniffed header)."""
    crc = 0xFFFFFFFF
    table = _TABLE_LIST
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The masked CRC32C TFRecord stores (see the module docstring)."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


@dataclass
class Framing:
    """Where the records of a TFRecord buffer are.

    Attributes:
        offsets: int64 byte offset of each complete record's header.
        lengths: int64 data length of each complete record.
        tail_offset: byte offset of an incomplete last record, or -1 when the buffer ends cleanly.
        tail_reason: what is missing from that last record (empty when there is none).
    """

    offsets: np.ndarray
    lengths: np.ndarray
    tail_offset: int = -1
    tail_reason: str = ""


class FramingError(Exception):
    """A record whose framing is wrong: ``record`` (0-based), ``offset`` (bytes) and ``what``."""

    def __init__(self, record: int, offset: int, what: str) -> None:
        super().__init__(what)
        self.record = record
        self.offset = offset
        self.what = what


def frame(buf, *, release=None) -> Framing:
    """Find every record of ``buf`` (bytes or mmap) and check the CRC of every record length.

    Args:
        buf: the file's bytes.
        release: optional ``release(end)`` called as framing moves on, so that the caller may drop
            the pages before byte ``end`` from memory (they are not read again by this function).

    Raises:
        FramingError: a length whose CRC is wrong (garbage or corruption). An incomplete last
            record is not an error here; it is returned in ``tail_offset``.
    """
    n = len(buf)
    arr = np.frombuffer(buf, dtype=np.uint8)
    unpack = _U64.unpack_from
    off_parts: list[np.ndarray] = []
    len_parts: list[np.ndarray] = []
    checked = 0  # parts whose length CRCs were checked
    found = 0  # records in those parts
    off = 0
    block = 1024
    tail_offset, tail_reason = -1, ""
    while True:
        # Slow phase: read up to 32 records one by one (the only sequential work).
        offs: list[int] = []
        lens: list[int] = []
        while off + HEADER <= n and len(offs) < 32:
            length = unpack(buf, off)[0]
            if off + HEADER + length + FOOTER > n:
                if masked_crc32c(bytes(buf[off:off + 8])) != int.from_bytes(buf[off + 8:off + 12], "little"):
                    off_parts.append(np.asarray(offs, dtype=np.int64))
                    len_parts.append(np.asarray(lens, dtype=np.int64))
                    checked, found = _check_new(arr, off_parts, len_parts, checked, found)
                    raise FramingError(found, off, "the CRC of the record length is wrong")
                tail_offset = off
                tail_reason = f"{length + FOOTER} bytes of data and CRC expected, {n - off - HEADER} present"
                break
            offs.append(off)
            lens.append(length)
            off += HEADER + length + FOOTER
        off_parts.append(np.asarray(offs, dtype=np.int64))
        len_parts.append(np.asarray(lens, dtype=np.int64))
        if tail_offset >= 0 or off + HEADER > n:
            break
        # Speculative phase: a scalar writer repeats a short cycle of record lengths (one per
        # tag). Predict the next `block` records from that cycle and keep the prefix whose
        # lengths, read at the predicted offsets, match. By induction each kept offset is a
        # true record start, so this is exact, not a heuristic.
        period = _period(lens)
        while period:
            pattern = np.asarray(lens[-period:], dtype=np.int64)
            pred_len = np.tile(pattern, block // period + 1)[:block]
            pred_off = off + np.concatenate(([0], np.cumsum(pred_len[:-1] + HEADER + FOOTER)))
            fits = pred_off + HEADER + pred_len + FOOTER <= n
            if not fits.all():
                k = int(np.argmin(fits))
                pred_len, pred_off = pred_len[:k], pred_off[:k]
            if not len(pred_off):
                break
            got = gather(arr, pred_off, 8).view("<u8").ravel()
            ok = got == pred_len.astype(np.uint64)
            k = len(ok) if ok.all() else int(np.argmin(ok))
            off_parts.append(pred_off[:k])
            len_parts.append(pred_len[:k])
            if k == 0:
                break
            off = int(pred_off[k - 1] + HEADER + pred_len[k - 1] + FOOTER)
            lens = list(np.roll(pattern, -(k % period)))  # the cycle, in phase with the next record
            checked, found = _check_new(arr, off_parts, len_parts, checked, found)
            if release is not None:
                release(off)
            if k < block:
                block = max(1024, block // 2)
                break
            block = min(block * 2, 1 << 20)
        if off + HEADER > n:
            break
    if tail_offset < 0 and off < n:
        tail_offset, tail_reason = off, f"a 12-byte record header expected, {n - off} bytes present"
    _check_new(arr, off_parts, len_parts, checked, found)
    offsets = np.concatenate(off_parts)
    lengths = np.concatenate(len_parts)
    return Framing(offsets, lengths, tail_offset, tail_reason)


def _check_new(arr: np.ndarray, off_parts: list[np.ndarray], len_parts: list[np.ndarray], checked: int,
               found: int) -> tuple[int, int]:
    """Check the length CRCs of the parts not checked yet; returns the new (checked, found)."""
    if checked < len(off_parts):
        offsets = np.concatenate(off_parts[checked:])
        _check_lengths(arr, offsets, np.concatenate(len_parts[checked:]), first=found)
        found += len(offsets)
    return len(off_parts), found


def _period(lengths: list[int]) -> int:
    """Smallest cycle (1..16) the whole list repeats with, or 0 when it does not repeat."""
    n = len(lengths)
    for p in range(1, min(16, n // 2) + 1):
        if all(lengths[i] == lengths[i - p] for i in range(p, n)):
            return p
    return 0


def _check_lengths(arr: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, *, first: int = 0) -> None:
    """Check the length CRC of every record (a CRC per distinct length, then one comparison).

    ``first`` is the number of the first of these records in the file, for the error.
    """
    if not len(offsets):
        return
    stored = gather(arr, offsets + 8, 4).view("<u4").ravel()
    if int(lengths.max()) < 1 << 20:  # the usual case: a dense table, no sort
        uniq = np.flatnonzero(np.bincount(lengths))
        table = np.zeros(int(uniq[-1]) + 1, dtype=np.uint32)
        table[uniq] = [masked_crc32c(int(u).to_bytes(8, "little")) for u in uniq]
        expected = table[lengths]
    else:
        uniq, inverse = np.unique(lengths, return_inverse=True)
        expected = np.asarray([masked_crc32c(int(u).to_bytes(8, "little")) for u in uniq], dtype=np.uint32)[inverse]
    bad = np.flatnonzero(expected != stored)
    if len(bad):
        i = int(bad[0])
        raise FramingError(first + i, int(offsets[i]), "the CRC of the record length is wrong")


def gather(arr: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """Rows ``arr[start:start + width]`` for every start, as a ``(len(starts), width)`` uint8 copy.

    Indexes a strided window view with one int64 per row instead of one per byte.
    """
    if len(arr) < width:
        return np.empty((0, width), dtype=np.uint8)
    return np.lib.stride_tricks.sliding_window_view(arr, width)[starts]


def unmask(masked: np.ndarray) -> np.ndarray:
    """Invert the TFRecord CRC masking (uint32 arrays): rotate ``masked - delta`` left by 15."""
    x = (masked.astype(np.uint32) - np.uint32(_MASK_DELTA)).astype(np.uint32)
    return ((x << 15) | (x >> 17)).astype(np.uint32)


_ZERO_TABLES: list[np.ndarray] = [_TABLE]


def position_table(bytes_after: int) -> np.ndarray:
    """CRC contribution of a byte followed by ``bytes_after`` bytes (uint32 table of 256).

    CRC32C is affine over GF(2): for two messages of equal length, ``crc(x ^ y) = crc(x) ^ lin(y)``
    where ``lin`` is the CRC register (initial value 0, no final xor). ``lin`` of a message that is
    zero except byte ``b`` at distance ``k`` from the end is ``table_k[b]``. So the CRCs of many
    records that share all but a few byte positions cost one lookup per varying byte.
    """
    while len(_ZERO_TABLES) <= bytes_after:
        z = _ZERO_TABLES[-1]
        _ZERO_TABLES.append((_TABLE[z & 0xFF] ^ (z >> 8)).astype(np.uint32))
    return _ZERO_TABLES[bytes_after]


def stored_crcs(arr: np.ndarray, offsets: np.ndarray, length: int) -> np.ndarray:
    """The unmasked data CRCs stored after records of data length ``length`` (uint32)."""
    pos = offsets + HEADER + length
    return unmask(gather(arr, pos, 4).view("<u4").ravel())


def data_crc(data) -> int:
    """Unmasked CRC32C of one record's data (google-crc32c when installed, else pure Python)."""
    try:
        import google_crc32c
    except ImportError:  # pragma: no cover - the tensorboard extra installs it
        return crc32c(bytes(data))
    return int(google_crc32c.value(bytes(data)))
