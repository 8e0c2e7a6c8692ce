"""Read TensorBoard event files (and run directories of them) into a RunLog, every point kept.

Written by ``torch.utils.tensorboard``, ``tensorboardX``, Lightning's ``TensorBoardLogger`` and TF2's
``tf.summary`` alike: the file is a TFRecord stream of ``Event`` protos. Unlike tensorboard's own
``EventAccumulator`` this reader keeps every point (no 10,000-per-tag reservoir), keeps step 0
(proto3 leaves ``step`` out when it is 0), checks both CRCs of every record, and is fast:

1. :func:`lossguard.io.tfevents.record.frame` finds the records (a short Python loop that predicts the
   writer's cycle of record lengths and verifies it with array operations).
2. Records are grouped by length. Within a group, one record is parsed in full
   (:mod:`lossguard.io.tfevents.proto`) and becomes a *template*; every record whose bytes equal the
   template outside the wall-time, step and value bytes has the same layout, so those fields are
   decoded for the whole group with numpy, and so is the data CRC (CRC32C is affine, so only the
   varying bytes need a table lookup). Anything unusual takes the per-record slow path.

Files and segments: each event file is a segment (a resumed run writes a new file; the segment's
``start_time`` is the wall time of the file's first event). Inside one file, a step going strictly
*backwards* starts a new segment (a process that restarted and appended; TensorBoard's own loader
treats it as a restart too), so :func:`lossguard.stitch.stitch` can mark what it superseded. Only
the run's main metrics (loss, val_loss, grad_norm, lr, loss_scale, loss streams) are judged when
the file has one: bookkeeping tags are re-logged freely (HF's Trainer writes ``train/epoch`` again
with every eval log and with the final summary; Lightning writes ``epoch`` with every ``log_dict``
call, two or three times per validation step). A tag written twice at the *same* step is not a
restart: the last value written is kept, as TensorBoard's own loader shows it.

Metric names: tags go through :func:`lossguard.metrics.canonical_name`. The sub-directory that
``add_scalars(main_tag, {key: value})`` writes (``<main_tag>/<key>/`` with tensorboardX,
``<main_tag>_<key>/`` with torch.utils.tensorboard, each holding tag ``main_tag``) becomes a
stream, so ``add_scalars("loss", {"cm4": ..})`` gives ``loss/cm4``. Other sub-directories (run
versions, resumes) do not change the name: the same tag in them is the same metric. The stream
writers run concurrently with the main one, so when a directory is read, a stream file joins the
segment of the main file that was being written when it started rather than being taken for a
second launch that restarted at step 0.

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
from .tfevents import record as tfr
from .tfevents.batch import Decoded, corrupt, decode
from .tfevents.rules import judges_restarts, restart_records, stream_name, wall_time_at

NAME = "tensorboard"
"""Registry name of this reader."""


def sniff(path: Path, head: bytes) -> bool:
    """True when ``head`` starts with a TFRecord header whose length CRC is right."""
    if len(head) < 12:
        return False
    return tfr.masked_crc32c(head[:8]) == int.from_bytes(head[8:12], "little")


def is_event_file(path: Path) -> bool:
    """True for file names TensorBoard writers use (``events.out.tfevents.*``)."""
    return "tfevents" in path.name


def read(path: Path, *, root: Path | None = None, files: list[Path] | None = None) -> RunLog:
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
        found = path.rglob("*") if files is None else files
        files = sorted((p for p in found if p.is_file() and is_event_file(p)),
                       key=lambda p: (str(p.parent), p.name))
        if not files:
            raise LogFormatError("no TensorBoard event file (events.out.tfevents.*) in this directory", path=path,
                                 fix="name the run directory that holds the event files, or the files themselves")
        loaded = []
        for f in files:
            if f.stat().st_size == 0:
                builder.metadata.setdefault("warnings", []).append(
                    f"{f}: empty event file skipped (writer not flushed yet)")
                continue
            loaded.append((f, _load(f, builder)))
    else:
        root = path.parent if root is None else Path(root)
        loaded = [(path, _load(path, builder))]
    # add_scalars writes each stream with its own writer, concurrently with the main one: those
    # files join the segment of the main file that was being written when they started, instead of
    # looking like a second launch that restarted at step 0.
    streams = [(f, d) for f, d in loaded if d.tags and all(stream_name(f, root, t) for t in d.tags)]
    mains = [(f, d) for f, d in loaded if (f, d) not in streams] if len(streams) < len(loaded) else []
    main_segments: list[tuple[float, int]] = []
    for f, d in mains or loaded:
        main_segments += _add_points(f, root, builder, names, d, join=None)
    if mains:
        for f, d in streams:
            _add_points(f, root, builder, names, d, join=main_segments)
    builder.metadata["tags"] = {metric: tag for (_, tag), metric in names.items()}
    return builder.build()


def _load(path: Path, builder: RunLogBuilder) -> Decoded:
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
        framing = tfr.frame(buf, release=_releaser(buf))
    except tfr.FramingError as exc:
        raise corrupt(path, exc.record, exc.offset, exc.what) from None
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
    return decode(path, np.frombuffer(buf, dtype=np.uint8), framing, release=_releaser(buf))


def _releaser(buf: mmap.mmap):
    """A function that drops the mapped pages before a byte offset (they were decoded already),
    so that reading a large file does not keep all of it resident; None where unsupported."""
    if not hasattr(buf, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return None
    done = 0

    def release(end: int) -> None:
        nonlocal done
        end -= end % mmap.PAGESIZE
        if end > done:
            buf.madvise(mmap.MADV_DONTNEED, done, end - done)  # read-only mapping: re-read if touched
            done = end

    return release


def _add_points(path: Path, root: Path, builder: RunLogBuilder, names: dict[tuple[str, str], str],
                d: Decoded, *, join: list[tuple[float, int]] | None) -> list[tuple[float, int]]:
    """Add one file's points; returns its segments as ``(start_time, index)``.

    With ``join`` (the main files' segments), each of this file's stretches goes into the main
    segment that started last before it instead of a segment of its own.
    """
    if d.file_version:
        builder.metadata.setdefault("file_version", d.file_version)
    if not d.parts:
        return []  # only non-scalar records (graphs, histograms, the file header)
    tags = {tid: d.take(tid) for tid in d.tags.values()}  # tag id -> (record, step, value)
    boundaries = restart_records({tid: tags[tid] for tid in _judged_tags(d.tags)})
    seg_ids, made = [], []
    for i, first_rec in enumerate([0] + boundaries):
        start = wall_time_at(d.wall, first_rec)
        target = _latest_before(join, start) if join else None
        if target is None:
            note = (f"event file {path.name}" if i == 0 else
                    f"steps restart at record {first_rec + 1} of {path.name}")
            target = builder.start_segment(str(path), start_time=start, note=note)
            made.append((start if start is not None else np.inf, target))
        seg_ids.append(target)
    used = set(names.values())
    for tag_name, tid in d.tags.items():
        key = (str(path.parent), tag_name)
        if key not in names:
            metric = stream_name(path, root, tag_name) or canonical_name(tag_name)
            if metric in used and not any(k[1] == tag_name for k, m in names.items() if m == metric):
                metric = tag_name.strip()  # a second tag with the same canonical name keeps its own
            names[key] = metric
            used.add(metric)
        rec, steps, values = tags.pop(tid)
        if len(seg_ids) == 1:
            builder.add(names[key], *_last_per_step(rec, steps, values), segment=seg_ids[0])
            continue
        segment_of = np.searchsorted(np.asarray(boundaries, dtype=np.int64), rec, side="right")
        for i, seg in enumerate(seg_ids):
            part = np.flatnonzero(segment_of == i)
            if len(part):
                builder.add(names[key], *_last_per_step(rec[part], steps[part], values[part]), segment=seg)
    return made


def _latest_before(segments: list[tuple[float, int]], start: float | None) -> int | None:
    """The segment that started last at or before ``start`` (1 s of slack: writers start lazily)."""
    if start is None:
        return None
    earlier = [(t, i) for t, i in segments if t <= start + 1.0]
    return max(earlier)[1] if earlier else None


def _judged_tags(tag_ids: dict[str, int]) -> list[int]:
    """The tags whose steps decide restarts: the main metrics when the file has any, else all.

    Bookkeeping tags (epoch, runtime, samples per second) are written whenever a framework logs
    anything, at whatever step it is at, so their steps say nothing about a restart.
    """
    main = [tid for tag, tid in tag_ids.items() if judges_restarts(canonical_name(tag))]
    return main or list(tag_ids.values())


def _last_per_step(rec: np.ndarray, steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Steps and values of one tag in one segment, one point per step: the last one written.

    A tag written again at a step it already has (a re-logged bookkeeping tag, or a main metric
    logged twice before the step advanced) replaces the earlier value, as TensorBoard shows it.
    """
    if len(steps) < 2 or bool(np.all(steps[1:] > steps[:-1])):
        return steps, values
    order = np.lexsort((rec, steps))  # by step, then by write order
    s = steps[order]
    last = np.r_[s[1:] != s[:-1], True]
    return s[last], values[order][last]
