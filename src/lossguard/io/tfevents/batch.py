"""Decoding the records of one event file, batched by byte layout (the fast path of the reader).

Records are grouped by length. Within a group, one record is parsed in full
(:mod:`lossguard.io.tfevents.proto`) and becomes a *template*; every record whose bytes equal the
template outside the wall-time, step and value bytes has the same layout, so those fields are
decoded for the whole batch with numpy, and so is the data CRC (CRC32C is affine, so only the
varying bytes need a table lookup: :func:`lossguard.io.tfevents.record.position_table`). A record whose
layout can't be reused (or a group with more than ``_MAX_TEMPLATES`` layouts) takes the
per-record slow path. Both paths give the same points; the tests compare them with tensorboard's
own loader.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import LogFormatError
from . import record as tfr
from .proto import ParsedEvent, ProtoError, parse_event

_MAX_TEMPLATES = 32  # per length group; beyond this the records are too irregular to batch
_WIDTH = {"<f4": 4, "<f8": 8, "<f2": 2, "bf16": 2, "zero": 0}
FIX_CORRUPT = ("the file is damaged (a disk or copy error, or not an event file); re-copy it from the "
               "training machine, or move it out of the run directory to read the other files")


def corrupt(path: Path, record: int, offset: int, what: str) -> LogFormatError:
    """The error for a damaged record (``record`` is 0-based; messages count from 1)."""
    return LogFormatError(what, path=path, where=f"record {record + 1}, byte {offset}", fix=FIX_CORRUPT)


class Decoded:
    """What one file holds: scalar batches per tag, wall time per record (NaN where absent), tag
    name -> id, the ``file_version`` string, and the errors found (raised by :func:`decode`)."""

    def __init__(self, n_records: int) -> None:
        self.parts: dict[int, list[tuple[np.ndarray, int, np.ndarray, np.ndarray]]] = {}
        self.wall = np.full(n_records, np.nan)
        self.tags: dict[str, int] = {}
        self.file_version: str | None = None
        self.errors: list[tuple[int, LogFormatError]] = []
        self.multi = False  # some record holds more than one scalar (TF1 merged summaries)

    def take(self, tag_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(record, step, value) of one tag in file order; the batches are released."""
        parts = self.parts.pop(tag_id, [])
        if not parts:
            empty = np.empty(0, np.int64)
            return empty, empty, np.empty(0, np.float64)
        rec = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
        steps = np.concatenate([p[2] for p in parts]) if len(parts) > 1 else parts[0][2]
        values = np.concatenate([p[3] for p in parts]) if len(parts) > 1 else parts[0][3]
        if len(parts) > 1 and np.any(np.diff(rec) < 0):
            # Batches are usually already in file order (a tag's records grow with its step's
            # varint); otherwise order by record, then by position inside the record.
            slot = np.concatenate([np.full(len(p[0]), p[1], np.int32) for p in parts])
            order = np.lexsort((slot, rec))
            rec, steps, values = rec[order], steps[order], values[order]
        return rec, steps, values

    def tag_id(self, tag: str) -> int:
        """A small integer for ``tag`` (new tags get the next one)."""
        return self.tags.setdefault(tag, len(self.tags))

    def emit(self, records: np.ndarray, ev: ParsedEvent, steps: np.ndarray, values: list[np.ndarray]) -> None:
        """Keep a batch: ``records`` share ``ev``'s layout; ``values[i]`` belongs to ``ev.values[i]``."""
        self.multi |= len(ev.values) > 1
        for slot, (v, vals) in enumerate(zip(ev.values, values, strict=True)):
            self.parts.setdefault(self.tag_id(v.tag), []).append((records, slot, steps, vals))


def decode(path: Path, arr: np.ndarray, framing: tfr.Framing, *, release=None,
           chunk: int = 1 << 18) -> Decoded:
    """Decode every complete record of one file (see the module docstring).

    Records are decoded ``chunk`` at a time so that the temporary byte rows stay small; after each
    chunk ``release(end)`` (if given) may drop the file pages before byte ``end`` from memory.

    Raises:
        LogFormatError: the first (lowest-numbered) record with a bad data CRC or a malformed Event.
    """
    offsets, lengths = framing.offsets, framing.lengths
    out = Decoded(len(offsets))
    for first in range(0, len(offsets), chunk):
        last = min(len(offsets), first + chunk)
        for idx in group_by_value(lengths[first:last]):
            idx += first
            length = int(lengths[idx[0]])
            # Rows padded to whole 64-bit words, so that the layout test is a few word comparisons.
            # Reading past a record is harmless (the mask ignores those bytes) unless it is the
            # file's end.
            width = -(-length // 8) * 8 or 8
            starts = offsets[idx] + tfr.HEADER
            if int(starts.max()) + width <= len(arr):
                padded = tfr.gather(arr, starts, width)
            else:
                padded = np.zeros((len(idx), width), dtype=np.uint8)
                padded[:, :length] = tfr.gather(arr, starts, length)
            stored = tfr.stored_crcs(arr, offsets[idx], length)
            _decode_group(path, idx, padded, length, stored, offsets, out)
        if out.errors:
            raise min(out.errors, key=lambda e: e[0])[1]
        if release is not None and last < len(offsets):
            release(int(offsets[last]))
    return out


def group_by_value(values: np.ndarray) -> list[np.ndarray]:
    """Indices of ``values`` grouped by value, each group in increasing order.

    A writer produces few distinct record lengths (or tags), so one pass per value beats a sort.
    """
    if not len(values):
        return []
    lo, hi = int(values.min()), int(values.max())
    if hi - lo < 1 << 20:
        distinct = np.flatnonzero(np.bincount(values - lo)) + lo
    else:
        distinct = np.unique(values)
    if len(distinct) <= 64:
        return [np.flatnonzero(values == v) for v in distinct]
    order = np.argsort(values, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(values[order])) + 1)


def _decode_group(path: Path, idx: np.ndarray, padded: np.ndarray, length: int, stored: np.ndarray,
                  offsets: np.ndarray, out: Decoded) -> None:
    """Decode records of one data length: template batches first, then the per-record slow path."""
    rows = padded[:, :length]
    words = padded.view("<u8")
    remaining = np.arange(len(idx))
    templates = 0
    while len(remaining):
        first = int(remaining[0])
        record = int(idx[first])
        data = rows[first].tobytes()
        if tfr.data_crc(data) != int(stored[first]):
            crc_error = corrupt(path, record, int(offsets[record]), "the CRC of the record data is wrong")
            out.errors.append((record, crc_error))
            remaining = remaining[1:]
            continue
        try:
            ev = parse_event(data)
        except ProtoError as exc:
            out.errors.append((record, LogFormatError(
                f"the record is not a TensorBoard Event: {exc}", path=path,
                where=f"record {record + 1}, byte {int(offsets[record])}", fix=FIX_CORRUPT)))
            remaining = remaining[1:]
            continue
        if out.file_version is None and ev.file_version:
            out.file_version = ev.file_version
        if not ev.fixed or templates >= _MAX_TEMPLATES or len(remaining) == 1:
            _emit_one(record, ev, out)
            remaining = remaining[1:]
            continue
        templates += 1
        varying = _varying_columns(ev)
        # Same layout = same bytes outside the varying fields, and the same continuation bits in
        # the step varint (they fix its length).
        mask = np.zeros(padded.shape[1], dtype=np.uint8)
        mask[:length] = 0xFF
        mask[varying] = 0
        if ev.step_pos >= 0:
            mask[ev.step_pos:ev.step_pos + ev.step_len] = 0x80
        mask64 = mask.view("<u8")
        want = (padded[first] & mask).view("<u8")
        sub = words if len(remaining) == len(words) else words[remaining]
        match = np.ones(len(sub), dtype=bool)
        for w in np.flatnonzero(mask64):
            match &= (sub[:, w] & mask64[w]) == want[w]
        members = remaining[match]
        block = rows if len(members) == len(rows) else rows[members]  # one layout: no copy
        # Data CRC of the whole batch: the template with its varying bytes zeroed, plus the
        # contribution of each varying byte (see tfr.position_table).
        zeroed = rows[first].copy()
        zeroed[varying] = 0
        crc = np.full(len(members), tfr.crc32c(zeroed.tobytes()), dtype=np.uint32)
        for j in varying:
            crc ^= tfr.position_table(length - 1 - int(j))[block[:, j]]
        bad = np.flatnonzero(crc != stored[members])
        if len(bad):
            r = int(idx[members[bad[0]]])
            out.errors.append((r, corrupt(path, r, int(offsets[r]), "the CRC of the record data is wrong")))
            keep = np.ones(len(members), dtype=bool)
            keep[bad] = False
            members, block = members[keep], block[keep]
        records = idx[members]
        if ev.wall_pos >= 0:
            out.wall[records] = block[:, ev.wall_pos:ev.wall_pos + 8].copy().view("<f8").ravel()
        steps = _varint_column(block, ev.step_pos, ev.step_len)
        values = [_value_column(block, v.pos, v.kind) for v in ev.values]
        out.emit(records, ev, steps, values)
        remaining = remaining[~match]


def _emit_one(record: int, ev: ParsedEvent, out: Decoded) -> None:
    out.wall[record] = ev.wall_time if ev.wall_pos >= 0 else np.nan
    if ev.values:
        out.emit(np.array([record], np.int64), ev, np.array([ev.step], np.int64),
                 [np.array([v.value], np.float64) for v in ev.values])


def _varying_columns(ev: ParsedEvent) -> np.ndarray:
    cols: list[int] = []
    if ev.wall_pos >= 0:
        cols.extend(range(ev.wall_pos, ev.wall_pos + 8))
    if ev.step_pos >= 0:
        cols.extend(range(ev.step_pos, ev.step_pos + ev.step_len))
    for v in ev.values:
        cols.extend(range(v.pos, v.pos + _WIDTH[v.kind]))
    return np.asarray(sorted(cols), dtype=np.int64)


def _varint_column(block: np.ndarray, pos: int, width: int) -> np.ndarray:
    """Decode a protobuf varint of ``width`` bytes at column ``pos`` of every row (int64)."""
    if pos < 0:
        return np.zeros(len(block), dtype=np.int64)  # proto3 left step out: it is 0
    acc = np.zeros(len(block), dtype=np.uint64)
    for k in range(width):
        acc |= (block[:, pos + k] & 0x7F).astype(np.uint64) << np.uint64(7 * k)
    return acc.view(np.int64)


def _value_column(block: np.ndarray, pos: int, kind: str) -> np.ndarray:
    if kind == "zero":
        return np.zeros(len(block), dtype=np.float64)
    raw = block[:, pos:pos + _WIDTH[kind]].copy()
    if kind == "bf16":
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).ravel().astype(np.float64)
    return raw.view(kind).ravel().astype(np.float64)
