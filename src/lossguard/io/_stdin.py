"""``-`` as a path: a log piped or pasted on standard input, and the refusal of other streams.

Readers sniff a file's head and may read it twice (a fast path, then an exact one for the error's
line), so stdin is first copied, block by block, into a private temporary file; that file is read
as any other and removed afterwards, and messages and sources name ``<stdin>``, not the temp file.

A FIFO, socket or device named as a path is refused: opening a FIFO that no process writes to
blocks forever, and one read twice loses what the first read took.
"""
from __future__ import annotations

import os
import stat
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Callable

from ..errors import LossguardError

STDIN_NAMES = ("-", "/dev/stdin", "/dev/fd/0")
"""Paths meaning "read standard input"."""
STDIN_LABEL = "<stdin>"
"""How stdin is named in sources and messages."""


def wants_stdin(paths) -> bool:
    """True when ``paths`` names standard input (``-``)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    return any(os.fspath(p) in STDIN_NAMES for p in paths)


def check_regular(path: Path) -> None:
    """Refuse a path that is not a regular file or directory (a FIFO would block the read forever)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # the caller's own check reports a missing or unreadable path
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    what = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
    raise LossguardError(f"not a regular file but {what}", path=str(path),
                         fix=f"pipe it on standard input instead: cat {path} | lossguard analyze -")


def read_piped(paths, read: Callable, **kwargs):
    """Read ``paths`` with ``-`` standing for standard input, through ``read`` (``read_log``).

    Raises:
        LossguardError: stdin is a terminal (nothing piped) or empty, ``-`` given twice, or the
            reader's own error (naming ``<stdin>``).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    if sum(p in STDIN_NAMES for p in paths) > 1:
        raise LossguardError("standard input ('-') named more than once", fix="name '-' once")
    stream = sys.stdin.buffer if hasattr(sys.stdin, "buffer") else None
    if stream is None or sys.stdin.isatty():
        raise LossguardError("'-' reads the log from standard input, but nothing is piped in", path=STDIN_LABEL,
                             fix="pipe or redirect the log: lossguard analyze - < train.log "
                                 "(or paste it, then press Ctrl-D)")
    fd, tmp = tempfile.mkstemp(prefix="lossguard-stdin-", suffix=".log")
    try:
        with os.fdopen(fd, "wb") as out:
            while block := stream.read(1 << 20):
                out.write(block)
        if os.path.getsize(tmp) == 0:
            raise LossguardError("standard input is empty", path=STDIN_LABEL,
                                 fix="pipe the log into lossguard: lossguard analyze - < train.log")
        try:
            log = read([tmp if p in STDIN_NAMES else p for p in paths], **kwargs)
        except LossguardError as exc:
            renamed = LossguardError.__new__(type(exc))  # same class, the temp file's name replaced
            LossguardError.__init__(renamed, exc.what.replace(tmp, STDIN_LABEL),
                                    path=None if exc.path is None else exc.path.replace(tmp, STDIN_LABEL),
                                    where=exc.where, fix=exc.fix)
            raise renamed from None
    finally:
        os.unlink(tmp)
    log.sources = [STDIN_LABEL if s == tmp else s for s in log.sources]
    log.segments = [replace(g, source=STDIN_LABEL) if g.source == tmp else g for g in log.segments]
    return log
