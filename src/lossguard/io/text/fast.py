"""The fast path: a whole file scanned in blocks, the most frequent line read for all lines of a block at once.

Most of a large console log is one line printed every step. Once that line's template has been
seen :data:`HOT_ROWS` times through the line-by-line path (:meth:`Scanner.feed`), its first raw line
becomes a hot line (:mod:`.hot`): steps that :func:`~.vector.match_block` matches against every line
of a later block at once (numpy, no Python per line), the captured numbers parsed in C (pyarrow).
A line the steps do not take is tried with the hot line's regex (the same match, one line at a
time), and a line neither takes goes through the line-by-line path, as does every block holding
``\r`` redraws: headers, crash lines and other templates are read as before and in order. Memory:
one block (:data:`BLOCK` bytes), a few arrays of one entry per line of it, and the tables' floats.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import numpy as np

from .hot import HotLine, compile_hot
from .lines import MAX_LINE, redraw_pieces
from .records import Scan, Scanner
from .vector import match_block

BLOCK = 4 << 20
"""Bytes read at a time."""
FIRST_BLOCK = 64 << 10
"""Bytes of the first block, read line by line before the hot line is chosen."""
HOT_ROWS = 64
"""Rows of one template before its line gets a compiled whole-line regex."""
MIN_LINE_BYTES = 8
"""Bytes a line of a block has on average, at least, for the block to be matched at once; a block of
shorter lines (empty ones) goes to the regex and the grammar, whose memory does not grow with it."""

_CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_SEP = re.compile(rb"[\r\n]")
_NL = 10  # b"\\n"


def scan_file(path: Path) -> Scan:
    """Scan a whole text file (the reader's path): blocks, the hot line at once, the rest line by line."""
    scanner = Scanner()
    hot: HotLine | None = None
    for number, data, lines in _blocks(path):
        if hot is None:
            _slow(scanner, data.decode("utf-8", errors="replace"), number)
            hot = _pick(scanner)
        elif b"\r" in data:
            _slow(scanner, data.decode("utf-8", errors="replace"), number)
        else:
            _hot_block(scanner, hot, data, number, lines)
    scanner.finish()
    return scanner.scan


def _hot_block(scanner: Scanner, hot: HotLine, data: bytes, number: int, lines: int) -> None:
    """One block of ``lines`` whole lines (no ``\r``) from line ``number``: the hot lines' rows, the rest line by line.

    A block in colour is first matched with its colour codes as literal text; unless every line
    matches so, the codes are removed (rarer escapes leave their line to the line-by-line path) and
    the block is matched without them."""
    text: str | None = None
    dense = len(data) >= MIN_LINE_BYTES * lines
    if b"\x1b" in data:
        if hot.colored is not None and dense:
            ok, starts, ends = match_block(hot.colored, data)
            if ok.all():
                _rows(scanner, hot, _numbers(data, starts, ends), number)
                return
        text = _CSI.sub("", data.decode("utf-8", errors="replace"))
        data = text.encode()
    if hot.steps is not None and dense:
        ok, starts, ends = match_block(hot.steps, data)
    else:
        ok = np.zeros(lines, dtype=bool)
        starts = ends = np.zeros((0, hot.regex.groups), dtype=np.int64)
    if ok.all():
        _rows(scanner, hot, _numbers(data, starts, ends), number)
        return
    if text is None:
        text = data.decode("utf-8", errors="replace")
    _mixed(scanner, hot, text, ok, _numbers(data, starts, ends), number)


def _mixed(scanner: Scanner, hot: HotLine, text: str, ok: np.ndarray, found: np.ndarray, number: int) -> None:
    """A block whose lines are not all taken by the steps: each other line is tried with the regex;
    each run of consecutive hot lines is read at once, the lines between runs line by line, in order."""
    lines = text.split("\n")
    match = hot.regex.match
    more, more_values = [], []
    others = np.flatnonzero(~ok)
    for k in range(0, len(others), 1 << 16):  # Python ints for 64k lines at a time (a block of empty lines)
        for i in others[k:k + (1 << 16)].tolist():
            m = match(lines[i] + "\n") if lines[i] else None
            if m is not None:
                more.append(i)
                more_values.append([float(g) for g in m.groups()])
    del others
    at = np.flatnonzero(ok)
    values = found
    if more:
        at = np.concatenate([at, np.array(more, dtype=np.int64)])
        values = np.vstack([found, np.array(more_values, dtype=np.float64).reshape(len(more), found.shape[1])])
        order = np.argsort(at, kind="stable")
        at, values = at[order], values[order]
    cuts = (np.flatnonzero(np.diff(at) != 1) + 1).tolist()
    done = 0  # lines before this one are read
    for lo, hi in zip([0, *cuts], [*cuts, len(at)], strict=True):
        if lo == hi:
            continue
        first, last = int(at[lo]), int(at[hi - 1]) + 1
        if first > done:
            _slow(scanner, "\n".join(lines[done:first]) + "\n", number + done)
        _rows(scanner, hot, values[lo:hi], number + first)
        done = last
    n = len(ok)
    if done < n:
        _slow(scanner, "\n".join(lines[done:n]) + "\n", number + done)


def _rows(scanner: Scanner, hot: HotLine, values: np.ndarray, number: int) -> None:
    """Consecutive hot lines (``values``: their captured numbers, one row a line) from line ``number``.

    The first and the last go through :meth:`Scanner.record` (a record header above may have changed;
    the last leaves the counters' totals and the scanner's state as reading every line would), the
    others are added to the same table at once. Under a template that is itself a record header,
    every line goes through :meth:`Scanner.record` (the header state changes with each)."""
    tpl = hot.table.template
    kept, total_at = hot.kept, hot.totals
    scan = scanner.scan
    n = len(values)
    scan.lines += n
    kept_values = values if hot.plain and not total_at else values[:, kept]

    def one(r: int):
        """Row ``r`` through the scanner, as the line-by-line path reads it."""
        totals = [(j, float(values[r, k])) for (j, _), k in zip(tpl.totals, total_at, strict=True)]
        return scanner.record(tpl, kept_values[r].tolist(), totals or (), number + r, "")

    table = None
    r = 0
    while r < n and (table is None or tpl.header):
        table = one(r)
        r += 1
    if table is None or r >= n - 1:
        if r < n:
            one(r)
        return
    rest = kept_values[r:n - 1]
    if table.inherited:
        prefix = np.asarray(table.data[-len(table.labels):-len(kept)], dtype=np.float64)
        rest = np.hstack([np.broadcast_to(prefix, (len(rest), len(prefix))), rest])
    table.data.frombytes(np.ascontiguousarray(rest, dtype=np.float64).tobytes())
    table.lines.frombytes(np.arange(number + r, number + n - 1, dtype=np.int64).tobytes())
    table.order.frombytes(np.arange(scan.numeric_lines + 1, scan.numeric_lines + n - r, dtype=np.int64).tobytes())
    scan.numeric_lines += n - 1 - r
    one(n - 1)


def _numbers(data: bytes, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The numbers at ``data[starts:ends]`` (arrays of one row per line) as floats of the same shape,
    parsed in C by pyarrow when installed (the ``fast`` extra the CSV reader uses too), else by ``float()``."""
    first, last = starts.ravel(), ends.ravel()
    values = _arrow_floats(data, first, last) if len(first) else np.zeros(0)
    if values is None:
        values = np.array([float(data[a:b]) for a, b in zip(first.tolist(), last.tolist(), strict=True)],
                          dtype=np.float64)
    return values.reshape(starts.shape)


def _arrow_floats(data: bytes, first: np.ndarray, last: np.ndarray) -> np.ndarray | None:
    """``data[first[i]:last[i]]`` cast to float64 by pyarrow (correctly rounded, as ``float()``), or None
    without pyarrow or on a spelling it does not read. No copy of the text: one string array over
    ``data`` whose strings are the numbers and, null between them, the text that separates them."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:
        return None
    count = 2 * len(first) - 1
    offsets = np.empty(2 * len(first), dtype=np.int64)
    offsets[0::2], offsets[1::2] = first, last
    valid = np.frombuffer(b"\x55" * ((count + 7) // 8), dtype=np.uint8)  # every other string: the numbers
    strings = pa.LargeStringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(data), pa.py_buffer(valid))
    try:
        column = pc.cast(strings, pa.float64())
    except (pa.ArrowInvalid, ValueError):
        return None
    # The float64 buffer itself: Array.to_numpy() imports pandas (0.3 s of a whole run).
    return np.frombuffer(column.buffers()[1], dtype=np.float64, count=count)[0::2].copy()


def _pick(scanner: Scanner) -> HotLine | None:
    """The compiled line of the table with the most rows, once one has :data:`HOT_ROWS` of them."""
    tables = [t for t in scanner.scan.tables if t.rows >= HOT_ROWS and t.raw is not None]
    if not tables:
        return None
    return compile_hot(max(tables, key=lambda t: t.rows))


def _slow(scanner: Scanner, text: str, first: int) -> None:
    """Line by line, ``\\r`` redraws split, pieces over :data:`MAX_LINE` skipped (a physical line of
    redraws is as long as the run; each redraw is short)."""
    scanner.feed((n, piece) for n, piece in redraw_pieces(text, first) if len(piece) <= MAX_LINE)


def _blocks(path: Path) -> Iterator[tuple[int, bytes, int]]:
    """(first line number, bytes of whole lines, number of ``\\n`` in them) for each block of the file.
    A block ends at its last ``\\n`` or ``\\r``, so a tqdm line of ``\\r`` redraws longer than a block is
    read in pieces (the next block goes on with the same line number); a piece longer than
    :data:`MAX_LINE` with neither is dropped as it streams by (memory stays one block)."""
    number, carry, skipping = 1, b"", False
    size = FIRST_BLOCK  # small at first: the hot line is known after a few hundred lines
    with open(path, "rb") as f:
        while True:
            block = f.read(size)
            size = BLOCK
            if not block:
                if carry and not skipping:
                    yield number, carry + b"\n", 1
                return
            data = carry + block
            cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
            if skipping:
                nl = _SEP.search(data)
                if nl is None:
                    carry = b""
                    continue
                at = nl.start()
                number += data[at] == _NL
                data, cut, skipping = data[at + 1:], cut - at - 1, False
            whole, carry = data[:cut], data[cut:]
            if whole:
                lines = whole.count(b"\n")
                yield number, whole, lines
                number += lines
            if len(carry) > MAX_LINE:
                carry, skipping = b"", True
