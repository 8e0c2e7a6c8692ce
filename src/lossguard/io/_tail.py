"""A half-written last line: the writer is still writing, or was killed mid-line.

A log that is being written (or whose writer was killed) can end in the middle of a line. Like a
TensorBoard file cut inside a record, such a file is read up to its last whole line, with a
warning, instead of being rejected whole. A last line is taken as cut short only when it has no
terminating newline *and* the format's own check says it is incomplete (a JSON object that does not
parse, a CSV row with fewer cells than the header): a complete final row that merely lacks its
newline is read as usual.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..errors import LogFormatError

_BACK = 64 * 1024
MAX_TAIL = 64 << 20
"""Longest last line looked at; a longer unterminated one is left to the reader's own error."""


def cut_partial_last_line(path: Path, complete: Callable[[bytes], bool],
                          warnings: list[str]) -> int | None:
    """The number of bytes to read so that a half-written last line is left out, or None to read all.

    Args:
        path: the file.
        complete: True when the (unterminated) last line is a whole record of the format.
        warnings: a warning naming what was left out is appended here.
    """
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            if size == 0:
                return None
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return None
            start = size
            tail = b""
            while start > 0 and b"\n" not in tail and len(tail) < MAX_TAIL:
                step = min(_BACK, start)
                start -= step
                f.seek(start)
                tail = f.read(step) + tail
    except OSError:
        return None  # the reader's own open reports it
    if b"\n" not in tail and start > 0:
        return None
    last = tail[tail.rfind(b"\n") + 1:]
    if not last.strip() or complete(last):
        return None
    shown = last[:40].decode("utf-8", "replace")
    warnings.append(f"the last line is incomplete ({len(last):,} bytes without a newline: {shown!r}"
                    f"{'...' if len(last) > 40 else ''}); the writer is still writing or was stopped: "
                    "read up to the line before it")
    return size - len(last)


def with_warnings(exc: LogFormatError, warnings: list[str]) -> LogFormatError:
    """``exc`` with what the reader left out added (a half-written last row may be why nothing is left)."""
    if not warnings:
        return exc
    return LogFormatError(f"{exc.what} (note: {'; '.join(warnings)})", path=exc.path, where=exc.where, fix=exc.fix)
