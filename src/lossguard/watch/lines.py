"""Decoders for line-oriented logs (CSV/TSV, JSONL, Megatron/DeepSpeed stdout), fed new bytes.

Each decoder keeps the half-written last line until its newline arrives, and parses the complete
lines with the very functions the whole-file reader of that format uses (:mod:`lossguard.io.csv`,
:mod:`lossguard.io.jsonl`, :mod:`lossguard.io.megatron`), so aliases, units, events and restart
rules are the same as in ``analyze``. Line numbers in error messages are those of the file.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import LogFormatError
from ..io import csv as csv_io
from ..io import jsonl_records as jsonl_io
from ..io import megatron as mg
from ..io import megatron_launch as mgl
from ..io.tabular import to_runlog
from ..runlog import RunLog, RunLogBuilder
from .history import Points


def runlog_points(log: RunLog, source: str, *, continues: bool) -> list[Points]:
    """One :class:`Points` per segment of a chunk's RunLog; the first continues the file's current
    segment when ``continues`` (a chunk is not a launch), later ones are launches of their own."""
    out = []
    for i, g in enumerate(log.segments):
        series = {}
        for name, s in log.series.items():
            m = s.segment == g.index
            if m.any():
                series[name] = (s.steps[m], s.values[m])
        out.append(Points(source, series, new_segment=not (continues and i == 0), note=g.note,
                          start_time=g.start_time))
    if out:
        out[0].events = list(log.events)
    elif log.events:
        out.append(Points(source, {}, events=list(log.events)))
    return out


class LineDecoder:
    """Splits bytes into complete lines; subclasses parse them (``_parse``)."""

    format = "lines"

    def __init__(self, path: str) -> None:
        self.path = path
        self._buf = b""
        self._restart = False
        self.line = 0  # lines consumed so far

    def restart(self) -> None:
        """The file was replaced or truncated: drop the partial line; the next points are a new launch."""
        self._buf = b""
        self.line = 0
        self._restart = True
        self._reset()

    def _reset(self) -> None:
        """Forget per-file parsing state (subclasses)."""

    @property
    def partial(self) -> bytes:
        """The bytes of an unfinished last line (waiting for its newline)."""
        return self._buf

    def feed(self, data: bytes) -> list[Points]:
        """Parse the complete lines among ``self.partial + data``."""
        buf = self._buf + data
        cut = buf.rfind(b"\n")
        if cut < 0:
            self._buf = buf
            return []
        self._buf = buf[cut + 1:]
        return self._lines(buf[:cut + 1])

    def flush(self) -> list[Points]:
        """The writer is gone: parse a last line that never got its newline, if it is whole."""
        if not self._buf.strip():
            return []
        data, self._buf = self._buf, b""
        try:
            return self._lines(data + b"\n")
        except LogFormatError:
            return []  # half a line: nothing a reader could use either

    def _lines(self, data: bytes) -> list[Points]:
        first = self.line + 1
        self.line += data.count(b"\n")
        restart, self._restart = self._restart, False
        return self._parse(data, first, restart)

    def _parse(self, data: bytes, first_line: int, restart: bool) -> list[Points]:
        raise NotImplementedError


class CsvDecoder(LineDecoder):
    """CSV/TSV: the first line is the header; every later batch of rows is parsed under it."""

    format = "csv"

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._reset()

    def _reset(self) -> None:
        self._header: bytes | None = None
        self._delim: str | None = None
        self._started = False  # rows handed over since the file (re)started
        self._label: str | None = None  # the ``segment`` column's last label, when the file has one

    def _parse(self, data: bytes, first_line: int, restart: bool) -> list[Points]:
        if self._header is None:
            head, _, data = data.partition(b"\n")
            self._header = head + b"\n"
            self._delim = csv_io.delimiter_of(head.decode("utf-8-sig", "replace")) or ","
            first_line += 1
            if not data.strip():
                return []  # the rows to come start the file's first segment (``_started`` is False)
        table = csv_io.read_exact(Path(self.path), self._header + data, self._delim or ",")  # set with the header
        if not table.rows:
            return []
        table.lines = table.lines + (first_line - 2)  # numbered as in the file, not in this batch
        segments, notes = csv_io.segments_of(table)
        log = to_runlog(table, path=Path(self.path), format=self.format, segments=segments, segment_notes=notes)
        # A batch continues the current launch unless its first row carries a new segment label.
        continues = self._started and (notes is None or notes[0] == self._label)
        self._label = notes[-1] if notes else None
        self._started = True
        return runlog_points(log, self.path, continues=continues)


class JsonlDecoder(LineDecoder):
    """JSONL: one record per line; a ``rollback``/``resume`` event record starts a new launch."""

    format = "jsonl"

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._reset()

    def _reset(self) -> None:
        self._started = False
        self._pending_new = False  # a boundary event arrived in a batch of its own

    def _parse(self, data: bytes, first_line: int, restart: bool) -> list[Points]:
        records, lines = jsonl_io.parse_lines(Path(self.path), data)
        lines = [n + first_line - 1 for n in lines]
        rows, row_lines, seg, notes, events = jsonl_io.split_events(records, lines)
        if not rows:
            new = any(jsonl_io.starts_segment(e) for e in events)
            self._pending_new = self._pending_new or new
            return [Points(self.path, {}, events=events)] if events else []
        # Rows before the first boundary event continue the current launch.
        continues = self._started and not restart and bool((seg == 0).any()) and not self._pending_new
        self._pending_new = False
        table = jsonl_io.records_table(rows, row_lines)
        log = to_runlog(table, path=Path(self.path), format=self.format,
                        segments=seg if len(notes) > 1 else None, segment_notes=notes, events=events)
        self._started = True
        return runlog_points(log, self.path, continues=continues)


class MegatronDecoder(LineDecoder):
    """Megatron-LM / DeepSpeed stdout, through the reader's own line parser and its launch state.

    Points are handed over as soon as their line is read; the reader's per-launch tables keep only
    the newest step per metric (what a later line of the same step may still replace), so memory
    does not grow with the file.
    """

    format = "megatron"

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._reset()

    def _reset(self) -> None:
        self._segments: list[mgl.Launch] = [mgl.Launch("start of file")]
        self._builder = RunLogBuilder(mg.NAME, unit="line")
        self._emitted: dict[tuple[int, str], tuple[int, float]] = {}  # (launch, metric) -> last (step, value)
        self._done = 0  # launches handed over before the current one
        self._started: set[int] = set()  # launches some of whose points were handed over

    def _parse(self, data: bytes, first_line: int, restart: bool) -> list[Points]:
        before = len(self._segments)
        text = data.decode("utf-8", "replace")
        for n, line in enumerate(text.splitlines(keepends=True), first_line):
            mgl.read_line(line, n, self._segments, self._builder)
        return self._emit(before, restart)

    def _emit(self, before: int, restart: bool) -> list[Points]:
        out: list[Points] = []
        for idx in range(self._done, len(self._segments)):
            seg = self._segments[idx]
            series = {}
            for metric, table in seg.points.items():
                last = self._emitted.get((idx, metric))
                new = sorted(s for s, (v, _, _) in table.items()
                             if last is None or s > last[0] or (s == last[0] and v != last[1]))
                if not new:
                    continue
                series[metric] = (np.asarray(new, dtype=np.int64), np.asarray([table[s][0] for s in new]))
                self._emitted[(idx, metric)] = (new[-1], table[new[-1]][0])
                newest = max(table)
                seg.points[metric] = {newest: table[newest]}  # bounded: keep what may still be replaced
            if series:
                # A launch that began inside this batch is new; the one that was current continues.
                fresh = idx >= before or (restart and idx == self._done)
                out.append(Points(self.path, series, new_segment=fresh or idx not in self._started,
                                  note=seg.note, start_time=seg.start_time))
                self._started.add(idx)
        self._done = len(self._segments) - 1
        if self._builder.events:
            if not out:
                out.append(Points(self.path, {}))
            out[0].events, self._builder.events = list(self._builder.events), []
        return out

    def flush(self) -> list[Points]:
        """Parse a last unterminated line, then count overflows still waiting for their step (as
        the reader does at the end of a file)."""
        out = super().flush()
        for seg in self._segments:
            mgl.flush_pending(seg, self._builder)
        return out + self._emit(len(self._segments), False)
