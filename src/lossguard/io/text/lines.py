"""The lines of a pasted or captured terminal log, cleaned of what terminals and markdown add.

A terminal capture separates tqdm's redraws with ``\\r``, not ``\\n``; a paste in an issue thread
is quoted (``> ``), fenced (```` ``` ````) or wrapped in backticks. :func:`text_lines` reads a file
in fixed blocks (memory does not grow with the length of a line), splits on both ``\\n`` and
``\\r``, strips the quoting and yields ``(line number, text)``. A piece longer than
:data:`MAX_LINE` between two separators is no progress line any tool prints; it is skipped, not held
in memory. A tqdm bar captured to a file is one physical line of ``\\r`` redraws that grows with the
run (200 KB for 1,000 steps): it is split at each ``\\r`` as it streams by, so its length is no limit.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

BLOCK = 1 << 20
"""Bytes read at a time."""
MAX_LINE = 64 * 1024
"""Longest piece (text between two ``\\n`` / ``\\r``) kept; longer ones (binary junk) are skipped."""

_QUOTE = re.compile(r"^(?:\s*>)+\s?")
_SEP = re.compile(rb"[\r\n]")
_NL = 10  # b"\\n"


def clean(line: str) -> str:
    """One line without markdown quote markers, fences and backticks."""
    line = _QUOTE.sub("", line)
    if "`" in line:
        line = line.replace("`", " ")
    return line


def text_lines(path: Path, *, limit: int | None = None) -> Iterator[tuple[int, str]]:
    """Yield ``(1-based line number, cleaned text)`` for every line of ``path``.

    Line numbers count ``\\n`` (as an editor does); the ``\\r``-separated redraws of one line share
    its number. Undecodable bytes become U+FFFD. ``limit`` stops after that many bytes.
    """
    number = 1
    carry = b""
    too_long = False
    read = 0
    with open(path, "rb") as f:
        while True:
            size = BLOCK if limit is None else min(BLOCK, limit - read)
            block = f.read(size) if size > 0 else b""
            read += len(block)
            if not block:
                if carry and not too_long:
                    yield from _pieces(number, carry)
                return
            data = carry + block if carry else block
            start = 0
            for sep in _SEP.finditer(data):
                end = sep.start()
                if too_long:
                    too_long = False
                else:
                    yield from _pieces(number, data[start:end])
                if data[end] == _NL:
                    number += 1
                start = end + 1
            carry = data[start:]
            if len(carry) > MAX_LINE:
                carry, too_long = b"", True


def _pieces(number: int, raw: bytes) -> Iterator[tuple[int, str]]:
    text = raw.decode("utf-8", errors="replace")
    for piece in text.split("\r"):
        if piece.strip():
            yield number, clean(piece)


def iter_decoded(data: bytes, first: int = 1) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a block of bytes, ``\\r`` redraws split (for sniffing and ``watch``)."""
    return redraw_pieces(data.decode("utf-8", errors="replace"), first)


def redraw_pieces(text: str, first: int = 1) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of every non-empty line of ``text`` (numbered from ``first``), a line of
    ``\\r`` redraws split into its non-blank pieces, all under that line's number."""
    for n, line in enumerate(text.split("\n"), first):
        if "\r" in line:
            for piece in line.split("\r"):
                if piece.strip():
                    yield n, piece
        elif line:
            yield n, line
