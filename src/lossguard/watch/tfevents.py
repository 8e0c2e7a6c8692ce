"""Decoder for a growing TensorBoard event file: complete TFRecords only, both CRCs checked.

A writer appends records (``uint64 length``, its masked CRC32C, the ``Event`` bytes, their masked
CRC32C) and flushes every few seconds, so the file often ends inside a record; a writer killed
mid-record leaves it that way for good. The decoder keeps the unfinished record's bytes and waits
for the rest, exactly as TensorBoard does; :attr:`EventFileDecoder.partial` says how much is
pending so the follower can report it once the writer has gone quiet.

Records are parsed with the reader's own proto decoder (:mod:`lossguard.io._event_proto`), tags
are named as the reader names them (``add_scalars`` sub-directories become loss streams), and a
main metric's step going strictly backwards starts a new segment (a process that restarted and
appended), as in :mod:`lossguard.io.tensorboard`.
"""
from __future__ import annotations

from pathlib import Path
from struct import Struct

import numpy as np

from ..errors import LogFormatError
from ..io import _tfrecord as tfr
from ..io._event_proto import ProtoError, parse_event
from ..io.tensorboard import _is_main, _stream_name
from ..metrics import canonical_name
from .history import Points

_HEAD = Struct("<QI")


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
        self._last_main: int | None = None
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
            metric = _stream_name(Path(self.path), self.root, tag) or canonical_name(tag)
            if metric in self.names.values() and not any(k[1] == tag for k, m in self.names.items() if m == metric):
                metric = tag.strip()  # a second tag with the same canonical name keeps its own
            self.names[key] = metric
        return self.names[key]

    def feed(self, data: bytes) -> list[Points]:
        """Parse every complete record among the pending bytes and ``data``.

        Raises:
            LogFormatError: a CRC mismatch or an undecodable record (the file is corrupt, not
                merely unfinished); the message names the record and its byte offset.
        """
        buf = self._buf + data
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
            self.records += 1
            pos = end
            if self._file_time is None:
                self._file_time = ev.wall_time or None
                start = self._file_time
            if not ev.values:
                continue
            metrics = [(self._metric(v.tag), v.value) for v in ev.values]
            if self.is_stream is None:
                self.is_stream = all(_stream_name(Path(self.path), self.root, v.tag) for v in ev.values)
            main = [m for m, _ in metrics if _is_main(m)]
            if main and self._last_main is not None and ev.step < self._last_main:
                if batch:  # close the launch so far; the rest is a new one
                    out.append(self._points(batch, new_seg, note, start))
                    batch = {}
                new_seg, start = True, ev.wall_time or None
                note = f"steps restart at record {self.records} of {Path(self.path).name}"
                self._last_main = None
            if main:
                self._last_main = ev.step if self._last_main is None else max(self._last_main, ev.step)
            for m, v in metrics:
                s, x = batch.setdefault(m, ([], []))
                s.append(ev.step)
                x.append(v)
        self._buf = buf[pos:]
        self._offset += pos
        if batch:
            out.append(self._points(batch, new_seg, note, start if start is not None else self._file_time))
        return out

    def _points(self, batch, new_seg: bool, note: str, start: float | None) -> Points:
        self._segments += new_seg
        series = {m: (np.asarray(s, dtype=np.int64), np.asarray(v, dtype=np.float64)) for m, (s, v) in batch.items()}
        return Points(self.path, series, new_segment=new_seg, note=note, start_time=start)

    def _corrupt(self, pos: int, what: str) -> LogFormatError:
        return LogFormatError(f"corrupt record ({what})", path=self.path,
                              where=f"record {self.records + 1}, byte {self._offset + pos}",
                              fix="the event file is damaged; lossguard stops following it")
