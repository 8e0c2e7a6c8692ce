"""Read TensorBoard event files (and run directories of them) into a RunLog, every point kept.

Written by ``torch.utils.tensorboard``, ``tensorboardX``, Lightning's ``TensorBoardLogger`` and TF2's
``tf.summary`` alike: the file is a TFRecord stream of ``Event`` protos. Unlike tensorboard's own
``EventAccumulator`` this reader keeps every point (no 10,000-per-tag reservoir), keeps step 0
(proto3 leaves ``step`` out when it is 0), checks both CRCs of every record, and is fast:

1. :func:`lossguard.io._tfrecord.frame` finds the records (a short Python loop that predicts the
   writer's cycle of record lengths and verifies it with array operations).
2. Records are grouped by length. Within a group, one record is parsed in full
   (:mod:`lossguard.io._event_proto`) and becomes a *template*; every record whose bytes equal the
   template outside the wall-time, step and value bytes has the same layout, so those fields are
   decoded for the whole group with numpy, and so is the data CRC (CRC32C is affine, so only the
   varying bytes need a table lookup). Anything unusual takes the per-record slow path.

Files and segments: each event file is a segment (a resumed run writes a new file; the segment's
``start_time`` is the wall time of the file's first event). Inside one file, a tag whose step does
not increase starts a new segment (a process that restarted and appended; TensorBoard's own
loader treats it as a restart too), so :func:`lossguard.stitch.stitch` can mark what it superseded.

Metric names: tags go through :func:`lossguard.metrics.canonical_name`. A sub-directory written by
``add_scalars(main_tag, {key: value})`` (``<main_tag>_<key>/`` holding tag ``main_tag``) becomes a
stream, so ``add_scalars("loss", {"cm4": ..})`` gives ``loss/cm4``.

Truncation: an incomplete *last* record is what a live or killed writer leaves behind (TensorBoard
itself reads such files and waits for the rest). The intact records are read and the RunLog's
``metadata["warnings"]`` says how much was cut off; a bad CRC anywhere, or a file with no complete
record, is an error.
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

from ..errors import LogFormatError
from ..metrics import canonical_name
from ..runlog import RunLog, RunLogBuilder
from . import _tfrecord as tfr
from ._event_proto import ParsedEvent, ProtoError, parse_event

NAME = "tensorboard"
"""Registry name of this reader."""

_MAX_TEMPLATES = 32  # per length group; beyond this the records are too irregular to batch
_WIDTH = {"<f4": 4, "<f8": 8, "<f2": 2, "bf16": 2, "zero": 0}
_FIX_CORRUPT = ("the file is damaged (a disk or copy error, or not an event file); re-copy it from the "
                "training machine, or move it out of the run directory to read the other files")


def sniff(path: Path, head: bytes) -> bool:
    """True when ``head`` starts with a TFRecord header whose length CRC is right."""
    if len(head) < 12:
        return False
    return tfr.masked_crc32c(head[:8]) == int.from_bytes(head[8:12], "little")


def is_event_file(path: Path) -> bool:
    """True for file names TensorBoard writers use (``events.out.tfevents.*``)."""
    return "tfevents" in path.name


def read(path: Path, *, root: Path | None = None) -> RunLog:
    """Read one event file, or every event file under a run directory, as one unstitched RunLog.

    Args:
        path: an event file, or a directory searched recursively for ``*tfevents*`` files.
        root: the directory the user named; sub-directories between it and a file name loss
            streams (see the module docstring). Defaults to ``path`` itself for a directory and the
            file's own directory for a file.

    Raises:
        LogFormatError: empty file, bad CRC, malformed record, no scalar at all; the message names
            the file, the record and its byte offset.
    """
    path = Path(path)
    builder = RunLogBuilder(NAME, unit="record")
    names: dict[tuple[str, str], str] = {}
    if path.is_dir():
        root = path if root is None else Path(root)
        files = sorted((p for p in path.rglob("*") if p.is_file() and is_event_file(p)),
                       key=lambda p: (str(p.parent), p.name))
        if not files:
            raise LogFormatError("no TensorBoard event file (events.out.tfevents.*) in this directory", path=path,
                                 fix="name the run directory that holds the event files, or the files themselves")
        for f in files:
            if f.stat().st_size == 0:
                builder.metadata.setdefault("warnings", []).append(f"{f}: empty event file skipped (writer not flushed yet)")
                continue
            _read_file(f, Path(root), builder, names)
    else:
        _read_file(path, path.parent if root is None else Path(root), builder, names)
    builder.metadata["tags"] = {metric: tag for (_, tag), metric in names.items()}
    return builder.build()


def _read_file(path: Path, root: Path, builder: RunLogBuilder, names: dict[tuple[str, str], str]) -> None:
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                raise LogFormatError("the event file is empty", path=path,
                                     fix="a writer fills the file when it flushes (every flush_secs, 120 s by "
                                         "default) or closes; wait, or call writer.flush()")
            buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise LogFormatError(f"cannot read the file: {exc.strerror or exc}", path=path,
                             fix="check that the path exists and is readable") from None
    try:
        framing = tfr.frame(buf)
    except tfr.FramingError as exc:
        raise _corrupt(path, exc.record, exc.offset, exc.what) from None
    if not len(framing.offsets):
        raise LogFormatError(f"no complete record: the file ends inside its first record ({framing.tail_reason})",
                             path=path, where="record 1, byte 0",
                             fix="the writer was stopped before its first flush; this file holds no data")
    if framing.tail_offset >= 0:
        n = len(framing.offsets)
        builder.metadata.setdefault("warnings", []).append(
            f"{path}: the last record (record {n + 1}, byte {framing.tail_offset}) is incomplete "
            f"({framing.tail_reason}); the writer was killed or is still writing. The {n} complete "
            f"records before it were read.")
    arr = np.frombuffer(buf, dtype=np.uint8)
    decoded = _decode(path, arr, framing)
    _add_points(path, root, builder, names, decoded)


class _Decoded:
    """Points of one file in record order: record, tag, step, value; wall time per record."""

    def __init__(self, n_records: int) -> None:
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.wall = np.full(n_records, np.nan)
        self.tags: dict[str, int] = {}
        self.file_version: str | None = None
        self.errors: list[tuple[int, LogFormatError]] = []

    def tag_id(self, tag: str) -> int:
        return self.tags.setdefault(tag, len(self.tags))

    def emit(self, records: np.ndarray, ev: ParsedEvent, steps: np.ndarray, values: list[np.ndarray]) -> None:
        for slot, (v, vals) in enumerate(zip(ev.values, values)):
            n = len(records)
            self.parts.append((records, np.full(n, slot, np.int32), np.full(n, self.tag_id(v.tag), np.int32),
                               steps, vals))


def _corrupt(path: Path, record: int, offset: int, what: str) -> LogFormatError:
    return LogFormatError(what, path=path, where=f"record {record + 1}, byte {offset}", fix=_FIX_CORRUPT)


def _decode(path: Path, arr: np.ndarray, framing: tfr.Framing) -> _Decoded:
    offsets, lengths = framing.offsets, framing.lengths
    out = _Decoded(len(offsets))
    order = np.argsort(lengths, kind="stable")
    cuts = np.flatnonzero(np.diff(lengths[order])) + 1
    for idx in np.split(order, cuts):
        length = int(lengths[idx[0]])
        rows = tfr.gather(arr, offsets[idx] + tfr.HEADER, length)
        stored = tfr.stored_crcs(arr, offsets[idx], length)
        _decode_group(path, idx, rows, stored, offsets, out)
    if out.errors:
        raise min(out.errors, key=lambda e: e[0])[1]
    return out


def _decode_group(path: Path, idx: np.ndarray, rows: np.ndarray, stored: np.ndarray,
                  offsets: np.ndarray, out: _Decoded) -> None:
    """Decode records of one data length: template batches first, then the per-record slow path."""
    length = rows.shape[1]
    remaining = np.arange(len(idx))
    templates = 0
    while len(remaining):
        first = int(remaining[0])
        record = int(idx[first])
        data = rows[first].tobytes()
        if tfr.data_crc(data) != int(stored[first]):
            out.errors.append((record, _corrupt(path, record, int(offsets[record]), "the CRC of the record data is wrong")))
            remaining = remaining[1:]
            continue
        try:
            ev = parse_event(data)
        except ProtoError as exc:
            out.errors.append((record, LogFormatError(
                f"the record is not a TensorBoard Event: {exc}", path=path,
                where=f"record {record + 1}, byte {int(offsets[record])}", fix=_FIX_CORRUPT)))
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
        fixed_cols = np.setdiff1d(np.arange(length), varying)
        template = rows[first]
        sub = rows if len(remaining) == len(rows) else rows[remaining]
        match = (sub[:, fixed_cols] == template[fixed_cols]).all(axis=1)
        for k in range(ev.step_len):  # a varint's length is fixed by its continuation bits
            match &= (sub[:, ev.step_pos + k] & 0x80) == (template[ev.step_pos + k] & 0x80)
        members = remaining[match]
        block = rows[members]
        # Data CRC of the whole batch: the template with its varying bytes zeroed, plus the
        # contribution of each varying byte (see tfr.position_table).
        zeroed = template.copy()
        zeroed[varying] = 0
        crc = np.full(len(members), tfr.crc32c(zeroed.tobytes()), dtype=np.uint32)
        for j in varying:
            crc ^= tfr.position_table(length - 1 - int(j))[block[:, j]]
        bad = np.flatnonzero(crc != stored[members])
        if len(bad):
            r = int(idx[members[bad[0]]])
            out.errors.append((r, _corrupt(path, r, int(offsets[r]), "the CRC of the record data is wrong")))
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


def _emit_one(record: int, ev: ParsedEvent, out: _Decoded) -> None:
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


def _metric_name(path: Path, root: Path, tag: str) -> str:
    """Tag (+ an ``add_scalars`` sub-directory) -> canonical metric name."""
    try:
        rel = path.parent.resolve().relative_to(root.resolve()).as_posix()
    except (ValueError, OSError):
        rel = "."
    if rel not in (".", ""):
        prefix = tag.replace("/", "_") + "_"
        sub = rel.rsplit("/", 1)[-1]
        if sub.startswith(prefix) and len(sub) > len(prefix):
            return canonical_name(f"{tag}/{sub[len(prefix):]}")
    return canonical_name(tag)


def _add_points(path: Path, root: Path, builder: RunLogBuilder, names: dict[tuple[str, str], str],
                d: _Decoded) -> None:
    if d.file_version:
        builder.metadata.setdefault("file_version", d.file_version)
    if not d.parts:
        # Only non-scalar records (graphs, histograms, the file header): an empty segment.
        builder.start_segment(str(path), start_time=_time(d.wall, 0), note=f"event file {path.name}: no scalars")
        return
    rec, slot, tag, steps, values = (np.concatenate(c) for c in zip(*d.parts))
    order = np.lexsort((slot, rec))
    rec, tag, steps, values = rec[order], tag[order], steps[order], values[order]
    boundaries = _restarts(rec, tag, steps)
    starts = [0] + boundaries
    seg_ids = []
    for i, first in enumerate(starts):
        first_rec = 0 if i == 0 else first
        note = (f"event file {path.name}" if i == 0 else
                f"steps restart at record {first_rec + 1} of {path.name}")
        seg_ids.append(builder.start_segment(str(path), start_time=_time(d.wall, first_rec), note=note))
    segment_of = np.searchsorted(np.asarray(boundaries, dtype=np.int64), rec, side="right")
    rel_dir = str(path.parent)
    used = set(names.values())
    for tag_name, tid in d.tags.items():
        key = (rel_dir, tag_name)
        if key not in names:
            metric = _metric_name(path, root, tag_name)
            if metric in used and not any(k[1] == tag_name for k, m in names.items() if m == metric):
                metric = tag_name.strip()  # a second tag with the same canonical name keeps its own
            names[key] = metric
            used.add(metric)
        sel = np.flatnonzero(tag == tid)
        if not len(sel):
            continue
        for i, seg in enumerate(seg_ids):
            part = sel[segment_of[sel] == i] if len(seg_ids) > 1 else sel
            if len(part):
                builder.add(names[key], steps[part], values[part], where=rec[part] + 1, segment=seg)


def _restarts(rec: np.ndarray, tag: np.ndarray, steps: np.ndarray) -> list[int]:
    """Records at which some tag's step stops increasing: restarts inside one file."""
    by_tag = np.argsort(tag, kind="stable")
    t, s = tag[by_tag], steps[by_tag]
    cand = np.flatnonzero((t[1:] == t[:-1]) & (s[1:] <= s[:-1])) + 1
    if not len(cand):
        return []
    pairs = sorted(zip(rec[by_tag[cand]].tolist(), rec[by_tag[cand - 1]].tolist()))
    accepted: list[int] = []
    for at, prev in pairs:
        # A later tag going back at the same restart is already covered by the boundary found.
        if not accepted or accepted[-1] <= prev:
            if at > prev:
                accepted.append(at)
    return accepted


def _time(wall: np.ndarray, record: int) -> float | None:
    if record < len(wall) and np.isfinite(wall[record]) and wall[record] > 0:
        return float(wall[record])
    return None
