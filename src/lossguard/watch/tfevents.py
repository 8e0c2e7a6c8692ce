"""Decoder for a growing TensorBoard event file: complete TFRecords only, both CRCs checked.

A writer appends records (``uint64 length``, its masked CRC32C, the ``Event`` bytes, their masked
CRC32C) and flushes every few seconds, so the file often ends inside a record; a writer killed
mid-record leaves it that way for good. The decoder keeps the unfinished record's bytes and waits
for the rest, exactly as TensorBoard does; :attr:`EventFileDecoder.partial` says how much is
pending so the follower can report it once the writer has gone quiet.

Records are parsed with the reader's own proto decoder (:mod:`lossguard.io.tfevents.proto`), tags
are named as the reader names them (``add_scalars`` sub-directories become loss streams), and a
main metric's step going strictly backwards starts a new segment (a process that restarted and
appended), as in :mod:`lossguard.io.tensorboard`.
"""
from __future__ import annotations

from pathlib import Path
from struct import Struct

import numpy as np

from ..errors import LogFormatError
from ..io.tfevents import record as tfr
from ..io.tfevents.batch import decode
from ..io.tfevents.proto import ProtoError, parse_event
from ..io.tfevents.rules import judges_restarts, restart_records, stream_name, wall_time_at
from ..metrics import canonical_name
from .history import Points

_HEAD = Struct("<QI")
BULK_BYTES = 256 << 10
"""Backlogs at least this large are decoded with the reader's vectorised path."""


class EventFileDecoder:
    """Turns the new bytes of one event file into :class:`~.history.Points`.

    Args:
        path: the event file.
        root: the run directory the user named (sub-directories below it name loss streams).
        names: (directory, tag) -> metric, shared by every event file of the run so a tag keeps
            one name across files, as in the reader.
    """

    format = "tensorboard"

    def __init__(self, path: str, root: Path, names: dict[tuple[str, str], str]) -> None:
        self.path = path
        self.root = root
        self.names = names
        self._restart()
        self.is_stream: bool | None = None  # every tag is an add_scalars stream (decided at the first scalar)

    def _restart(self) -> None:
        self._buf = b""
        self._offset = 0  # file offset of the first pending byte
        self.records = 0
        self._last: dict[str, tuple[int, int]] = {}  # judged metric -> (its last step, its last record)
        self._boundary = -1  # record at which the last restart was found
        self._segments = 0
        self._file_time: float | None = None

    def restart(self) -> None:
        """The file was replaced or truncated: start over from its first byte."""
        self._restart()

    @property
    def partial(self) -> bytes:
        """Bytes of a record not complete yet (a writer mid-flush, or one killed mid-record)."""
        return self._buf

    def flush(self) -> list[Points]:
        """Nothing to add at the end: an incomplete record is never guessed at."""
        return []

    def _metric(self, tag: str) -> str:
        key = (str(Path(self.path).parent), tag)
        if key not in self.names:
            metric = stream_name(Path(self.path), self.root, tag) or canonical_name(tag)
            if metric in self.names.values() and not any(k[1] == tag for k, m in self.names.items() if m == metric):
                metric = tag.strip()  # a second tag with the same canonical name keeps its own
            self.names[key] = metric
        return self.names[key]

    def _restarts_at(self, record: int, metric: str, step: int) -> bool:
        """The reader's rule (:func:`lossguard.io.tfevents.rules.restart_records`): a judged tag's
        step goes strictly back from its own previous point, and that point was written after the last restart."""
        last = self._last.get(metric)
        self._last[metric] = (step, record)
        return last is not None and step < last[0] and last[1] >= self._boundary

    def _judged(self, metrics) -> list[str]:
        """Main metrics decide restarts; bookkeeping ones only in a file that has no main metric."""
        main = [m for m in metrics if judges_restarts(m)]
        return main or [m for m in metrics if not any(judges_restarts(k) for k in self._last)]

    def feed(self, data: bytes) -> list[Points]:
        """Parse every complete record among the pending bytes and ``data``.

        A large backlog (a watch started on a long run) is decoded with the reader's vectorised
        framing and decoding; a few new records one by one.

        Raises:
            LogFormatError: a CRC mismatch or an undecodable record (the file is corrupt, not
                merely unfinished); the message names the record and its byte offset.
        """
        buf = self._buf + data
        out, pos = self._bulk(buf) if len(buf) >= BULK_BYTES else self._records(buf)
        self._buf = buf[pos:]
        self._offset += pos
        return out

    def _records(self, buf: bytes) -> tuple[list[Points], int]:
        pos, out = 0, []
        batch: dict[str, tuple[list[int], list[float]]] = {}
        new_seg, note, start = self._segments == 0, f"event file {Path(self.path).name}", None
        while len(buf) - pos >= tfr.HEADER:
            length, crc = _HEAD.unpack_from(buf, pos)
            if tfr.masked_crc32c(buf[pos:pos + 8]) != crc:
                raise self._corrupt(pos, "the length's CRC does not match")
            end = pos + tfr.HEADER + length + tfr.FOOTER
            if len(buf) < end:
                break  # the rest of this record is not written yet
            body = buf[pos + tfr.HEADER:end - tfr.FOOTER]
            if tfr.masked_crc32c(body) != int.from_bytes(buf[end - 4:end], "little"):
                raise self._corrupt(pos, "the data's CRC does not match")
            try:
                ev = parse_event(body)
            except ProtoError as exc:
                raise self._corrupt(pos, str(exc)) from None
            record = self.records
            self.records += 1
            pos = end
            if self._file_time is None:
                self._file_time = ev.wall_time or None
                start = self._file_time
            if not ev.values:
                continue
            metrics = [(self._metric(v.tag), v.value) for v in ev.values]
            if self.is_stream is None:
                self.is_stream = all(stream_name(Path(self.path), self.root, v.tag) for v in ev.values)
            back = [self._restarts_at(record, m, ev.step) for m in self._judged([m for m, _ in metrics])]
            if any(back):
                if batch:  # close the launch so far; the rest is a new one
                    out.append(self._points(batch, new_seg, note, start))
                    batch = {}
                self._boundary = record
                new_seg, start = True, ev.wall_time or None
                note = f"steps restart at record {record + 1} of {Path(self.path).name}"
            for m, v in metrics:
                s, x = batch.setdefault(m, ([], []))
                s.append(ev.step)
                x.append(v)
        if batch:
            out.append(self._points(batch, new_seg, note, start if start is not None else self._file_time))
        return out, pos

    def _bulk(self, buf: bytes) -> tuple[list[Points], int]:
        try:
            framing = tfr.frame(buf)
        except tfr.FramingError as exc:
            raise self._corrupt(exc.offset, exc.what) from None
        n = len(framing.offsets)
        if not n:
            return [], 0
        d = decode(Path(self.path), np.frombuffer(buf, dtype=np.uint8), framing)
        first = self.records
        self.records += n
        end = int(framing.offsets[-1] + tfr.HEADER + framing.lengths[-1] + tfr.FOOTER)
        if self._file_time is None:
            self._file_time = wall_time_at(d.wall, 0)
        if not d.tags:
            return [], end
        metric_of = {tid: self._metric(tag) for tag, tid in d.tags.items()}
        if self.is_stream is None:
            self.is_stream = all(stream_name(Path(self.path), self.root, tag) for tag in d.tags)
        tags = {tid: d.take(tid) for tid in d.tags.values()}
        judged = set(self._judged(list(metric_of.values())))
        bounds: list[int] = []
        for tid, (rec, steps, _) in tags.items():  # the reader's rule across the previous batch
            m = metric_of[tid]
            if m in judged and len(steps):
                last = self._last.get(m)
                if last is not None and steps[0] < last[0] and last[1] >= self._boundary:
                    bounds.append(int(rec[0]) + first)
        inside = restart_records({tid: (rec + first, st, v) for tid, (rec, st, v) in tags.items()
                            if metric_of[tid] in judged})
        cross = min(bounds) if bounds else None
        bounds = sorted({*([cross] if cross is not None else []), *(b for b in inside if cross is None or b > cross)})
        for tid, (rec, steps, _) in tags.items():
            if metric_of[tid] in judged and len(steps):
                self._last[metric_of[tid]] = (int(steps[-1]), int(rec[-1]) + first)
        if bounds:
            self._boundary = bounds[-1]
        out = []
        cuts = np.asarray(bounds, dtype=np.int64)
        for part in range(len(bounds) + 1):
            series = {}
            for tid, (rec, steps, values) in tags.items():
                m = np.searchsorted(cuts, rec + first, side="right") == part
                if m.any():
                    series[metric_of[tid]] = (steps[m].astype(np.int64), values[m].astype(np.float64))
            if not series:
                continue
            if part == 0:
                new_seg, note, start = self._segments == 0, f"event file {Path(self.path).name}", self._file_time
            else:
                b = bounds[part - 1]
                new_seg, start = True, wall_time_at(d.wall, b - first)
                note = f"steps restart at record {b + 1} of {Path(self.path).name}"
            self._segments += new_seg
            out.append(Points(self.path, series, new_segment=new_seg, note=note, start_time=start))
        return out, end

    def _points(self, batch, new_seg: bool, note: str, start: float | None) -> Points:
        self._segments += new_seg
        series = {m: (np.asarray(s, dtype=np.int64), np.asarray(v, dtype=np.float64)) for m, (s, v) in batch.items()}
        return Points(self.path, series, new_segment=new_seg, note=note, start_time=start)

    def _corrupt(self, pos: int, what: str) -> LogFormatError:
        return LogFormatError(f"corrupt record ({what})", path=self.path,
                              where=f"record {self.records + 1}, byte {self._offset + pos}",
                              fix="the event file is damaged; lossguard stops following it")
