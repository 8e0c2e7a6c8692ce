"""The fast path: a whole file scanned in blocks, the most frequent line read by one compiled regex.

Most of a large console log is one line printed every step. Once that line's template has been
seen :data:`HOT_ROWS` times through the line-by-line path (:meth:`Scanner.feed`), its first raw line
is turned into a regex that matches the whole line (its text literally, runs of spaces loosely, each
number as a group), and every later block of the file is searched with it (``finditer`` over
megabytes, in C). The lines between two matches, and every block holding ``\\r`` redraws, go through
the line-by-line path, so headers, crash lines and other templates are read as before and in order.
The regex is checked once against the template (the same numbers, in the same places) and is not
used if it disagrees. Memory: one block (:data:`BLOCK` bytes) and the tables' float arrays.
"""
from __future__ import annotations

import io
import re
from itertools import chain
from pathlib import Path
from typing import Iterator

import numpy as np

from .hot import HotLine, compile_hot
from .lines import MAX_LINE
from .records import Scan, Scanner

BLOCK = 4 << 20
"""Bytes read at a time."""
FIRST_BLOCK = 64 << 10
"""Bytes of the first block, read line by line before the hot line is chosen."""
HOT_ROWS = 64
"""Rows of one template before its line gets a compiled whole-line regex."""

_CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_SEP = re.compile(rb"[\r\n]")
_NL = 10  # b"\\n"


def scan_file(path: Path) -> Scan:
    """Scan a whole text file (the reader's path): blocks, the hot line by regex, the rest line by line."""
    scanner = Scanner()
    hot: HotLine | None = None
    for number, text in _blocks(path):
        if hot is None:
            _slow(scanner, text, number)
            hot = _pick(scanner)
            continue
        if "\r" in text:
            _slow(scanner, text, number)
            continue
        if "\x1b" in text:
            if hot.colored is not None and _bulk(scanner, hot, text, number, hot.colored):
                continue
            text = _CSI.sub("", text)  # colours; rarer escapes leave their line to the line-by-line path
        if _bulk(scanner, hot, text, number):
            continue
        pos, line = 0, number
        record, kept, plain, total_at = scanner.record, hot.kept, hot.plain, hot.totals
        tpl = hot.table.template
        scan = scanner.scan
        run: tuple | None = None  # (table, inherited values) while no other line comes between matches
        for m in hot.regex.finditer(text):
            start = m.start()
            if start > pos:
                gap = text[pos:start]
                _slow(scanner, gap, line)
                line += gap.count("\n")
                run = None  # the gap may hold a record header: go through record() once more
            groups = m.groups()
            if run is not None and not total_at:
                table, prefix = run
                if prefix:
                    table.data.extend(prefix)
                table.data.extend(map(float, groups) if plain else [float(groups[k]) for k in kept])
                table.lines.append(line)
                scan.numeric_lines += 1
                table.order.append(scan.numeric_lines)
            else:
                totals = ([(j, float(groups[k])) for (j, _), k in zip(tpl.totals, total_at, strict=True)]
                          if total_at else ())
                values = list(map(float, groups)) if plain else [float(groups[k]) for k in kept]
                table = record(tpl, values, totals, line, "")
                if table is not None and not tpl.header:
                    width = len(table.labels)
                    run = (table, table.data[-width:-len(values)] if table.inherited else None)
            scan.lines += 1
            line += 1
            pos = m.end()
        if pos < len(text):
            _slow(scanner, text[pos:], line)
    scanner.finish()
    return scanner.scan


def _bulk(scanner: Scanner, hot: HotLine, text: str, number: int, regex: re.Pattern | None = None) -> bool:
    """A block made only of hot lines (the common case of a long run): every row at once, the
    numbers converted by numpy, no Python per line. False (nothing read) when any other line is in
    the block, so the line-by-line loop keeps headers and other templates in their order."""
    tpl = hot.table.template
    if hot.totals or tpl.header:
        return False
    found = (regex or hot.bulk).findall(text)
    n = text.count("\n")
    if not found or len(found) != n:
        return False
    first = found[0] if isinstance(found[0], tuple) else (found[0],)
    table = scanner.record(tpl, [float(first[k]) for k in hot.kept], (), number, "")
    if table is None:
        return False
    if n > 1:
        width = len(hot.kept)
        values = _floats(found[1:], len(first))
        if not hot.plain:
            values = values[:, hot.kept]
        if table.inherited:
            prefix = np.asarray(table.data[-len(table.labels):-width], dtype=np.float64)
            values = np.hstack([np.broadcast_to(prefix, (n - 1, len(prefix))), values])
        table.data.frombytes(np.ascontiguousarray(values).tobytes())
        table.lines.frombytes(np.arange(number + 1, number + n, dtype=np.int64).tobytes())
        scan = scanner.scan
        table.order.frombytes(np.arange(scan.numeric_lines + 1, scan.numeric_lines + n, dtype=np.int64).tobytes())
        scan.numeric_lines += n - 1
    scanner.scan.lines += n
    return True


def _floats(rows: list, groups: int) -> np.ndarray:
    """The captured numbers of ``rows`` (tuples of strings, or strings for one group) as an
    ``(len(rows), groups)`` float array, parsed in C: by pyarrow's CSV reader when installed (the
    ``fast`` extra the CSV reader uses too; 5x numpy's text parser), else by numpy's; a spelling
    neither reads goes through ``float()``."""
    flat = list(rows) if groups == 1 and not isinstance(rows[0], tuple) else list(chain.from_iterable(rows))
    values = _arrow_floats(flat)
    if values is None:
        values = np.fromstring(" ".join(flat), dtype=np.float64, sep=" ")
        if len(values) != len(flat):
            values = np.array([float(x) for x in flat], dtype=np.float64)
    return values.reshape(len(rows), groups)


def _arrow_floats(flat: list[str]) -> np.ndarray | None:
    """``flat`` parsed by pyarrow's CSV reader (one value a row), or None without pyarrow or on any
    value it does not read as a float."""
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
    except ImportError:
        return None
    try:
        table = pacsv.read_csv(io.BytesIO("\n".join(flat).encode()),
                               read_options=pacsv.ReadOptions(column_names=["v"]),
                               convert_options=pacsv.ConvertOptions(column_types={"v": pa.float64()},
                                                                    null_values=[], strings_can_be_null=False))
    except (pa.ArrowInvalid, ValueError):
        return None
    # Read the float64 buffers directly: Array.to_numpy() imports pandas (0.3 s of a whole run).
    # No value can be null here (``null_values=[]``), so the data buffer is the whole column.
    chunks = [np.frombuffer(c.buffers()[1], dtype=np.float64, count=len(c), offset=c.offset * 8)
              for c in table.column(0).chunks]
    values = np.concatenate(chunks) if chunks else np.zeros(0)
    return values if len(values) == len(flat) else None


def _pick(scanner: Scanner) -> HotLine | None:
    """The compiled line of the table with the most rows, once one has :data:`HOT_ROWS` of them."""
    tables = [t for t in scanner.scan.tables if t.rows >= HOT_ROWS and t.raw is not None]
    if not tables:
        return None
    return compile_hot(max(tables, key=lambda t: t.rows))


def _slow(scanner: Scanner, text: str, first: int) -> None:
    """Line by line, ``\\r`` redraws split, pieces over :data:`MAX_LINE` skipped (a physical line of
    redraws is as long as the run; each redraw is short)."""
    def lines() -> Iterator[tuple[int, str]]:
        for n, line in enumerate(text.split("\n"), first):
            if not line:
                continue
            if "\r" in line:
                for piece in line.split("\r"):
                    if piece.strip() and len(piece) <= MAX_LINE:
                        yield n, piece
            elif len(line) <= MAX_LINE:
                yield n, line
    scanner.feed(lines())


def _blocks(path: Path) -> Iterator[tuple[int, str]]:
    """(first line number, text of whole lines) for each block of the file. A block ends at its last
    ``\\n`` or ``\\r``, so a tqdm line of ``\\r`` redraws longer than a block is read in pieces (the
    next block goes on with the same line number); a piece longer than :data:`MAX_LINE` with neither
    is dropped as it streams by (memory stays one block)."""
    number, carry, skipping = 1, b"", False
    size = FIRST_BLOCK  # small at first: the hot line is known after a few hundred lines
    with open(path, "rb") as f:
        while True:
            block = f.read(size)
            size = BLOCK
            if not block:
                if carry and not skipping:
                    yield number, carry.decode("utf-8", errors="replace") + "\n"
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
                yield number, whole.decode("utf-8", errors="replace")
                number += whole.count(b"\n")
            if len(carry) > MAX_LINE:
                carry, skipping = b"", True
