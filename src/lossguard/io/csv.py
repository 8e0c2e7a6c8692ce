"""CSV / TSV training logs: one row per logged step, one column per metric.

Column names go through :func:`lossguard.metrics.canonical_name` (``train/loss``, ``lm loss`` ->
``loss``). Empty cells are missing values, not NaN; ``nan``/``inf`` spellings are kept as NaN/Inf.
A ``segment`` column, where present, labels the launch each row was logged in (each change of label
starts a segment, as in the BLOOM chronicle excerpts). Text columns that are not metrics (labels,
dates) are ignored and listed in ``metadata["ignored_columns"]``.

pyarrow's CSV parser is used when installed (extra ``fast``); the stdlib ``csv`` path gives the same
result and the exact line of any bad cell, so every error is re-derived on that path.
"""
from __future__ import annotations

import csv as _csv
import io
from pathlib import Path

import numpy as np

from ..errors import LogFormatError
from ._csv_arrow import read_arrow
from ._columns import add_text_columns
from ._table import Table, densify, find_step_column, limit_columns, normalise, pandas_index
from ._tail import cut_partial_last_line, with_warnings
from .tabular import to_runlog

NAME = "csv"
SEGMENT_COLUMN = "segment"
_DELIMITERS = (",", "\t", ";")


def _first_line(head: bytes) -> str | None:
    if b"\0" in head:
        return None
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    try:
        return line.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def delimiter_of(header: str) -> str | None:
    """The delimiter of a header line: the most frequent of ``,``, tab and ``;`` (None if absent)."""
    counts = [(header.count(d), d) for d in _DELIMITERS]
    n, d = max(counts)
    return d if n else None


def sniff(path: Path, head: bytes) -> bool:
    """True for text whose first line is a delimited header naming a step column (or a .csv/.tsv file)."""
    header = _first_line(head)
    if not header or header.lstrip().startswith(("{", "[")):
        return False
    d = delimiter_of(header)
    if d is None:
        return False
    names = [n.strip().strip('"') for n in header.split(d)]
    if find_step_column(names) is not None:
        return True
    return path.suffix.lower() in (".csv", ".tsv")


def read_bytes(path: Path) -> bytes:
    """The file's bytes; an empty file or an unreadable one is a :class:`LogFormatError`."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LogFormatError(f"cannot read the file: {exc.strerror or exc}", path=str(path),
                             fix="check the path and its permissions") from exc
    if not data.strip():
        raise LogFormatError("the file is empty", path=str(path),
                             fix="point lossguard at a log that has at least a header and one row")
    return data


def check_file(path: Path) -> None:
    """Raise a :class:`LogFormatError` for a file that cannot be opened or holds no bytes."""
    try:
        size = path.stat().st_size
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise LogFormatError(f"cannot read the file: {exc.strerror or exc}", path=str(path),
                             fix="check the path and its permissions") from exc
    if size == 0:
        raise LogFormatError("the file is empty", path=str(path),
                             fix="point lossguard at a log that has at least a header and one row")


def read_table(path: Path, *, fast: bool = True) -> Table:
    """Parse a CSV/TSV file into a :class:`Table` (pyarrow when available and ``fast``).

    A half-written last row (no newline, fewer cells than the header) is left out with a warning
    in ``Table.warnings``.
    """
    check_file(path)
    with open(path, "rb") as f:
        head = f.read(65536)
    header = _first_line(head) or ""
    delimiter = delimiter_of(header) or ","
    warnings: list[str] = []
    width = _cells_in(header.encode("utf-8", "replace"), delimiter)
    limit = cut_partial_last_line(path, lambda last: _cells_in(last, delimiter) >= width, warnings)
    table = read_arrow(path, delimiter, limit, keep_text=(SEGMENT_COLUMN,)) if fast else None
    if table is None:
        data = read_bytes(path)
        table = read_exact(path, data if limit is None else data[:limit], delimiter)
    table.warnings.extend(warnings)
    return table


def _cells_in(line: bytes, delimiter: str) -> int:
    try:
        return len(next(_csv.reader([line.decode("utf-8", "replace").rstrip("\r")], delimiter=delimiter), []))
    except _csv.Error:  # a stray \r or NUL: the reader proper reports it at its line
        return -1


def read_exact(path: Path, data: bytes, delimiter: str) -> Table:
    """The table of CSV bytes ``data`` (a header line, then rows) by the stdlib parser: exact line
    numbers in every error. The exact path of :func:`read_table`, and what ``lossguard watch`` parses
    the new lines of a growing CSV with (behind the header it read first).

    Raises:
        LogFormatError: bytes that are not UTF-8, a bad header, a row whose cells do not match the
            header, or malformed quoting.
    """
    src = str(path)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise LogFormatError(f"bytes that are not UTF-8 text ({data[exc.start:exc.start + 4]!r})", path=src,
                             where=f"line {line}", fix="save the log as UTF-8 text") from None
    reader = _csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = next(reader, None)
        if not header:
            raise LogFormatError("no header line", path=src, where="line 1",
                                 fix="the first line must name the columns, e.g. step,loss,lr")
        names = pandas_index([h.strip() for h in header])
        _check_header(names, src)
        n = len(names)
        rows: list[list[str]] = []
        lines: list[int] = []
        start = reader.line_num + 1
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                start = reader.line_num + 1
                continue
            if len(row) != n:
                raise LogFormatError(f"{len(row)} fields where the header has {n}", path=src,
                                     where=f"line {start}",
                                     fix="every row needs one cell per header column (leave missing ones empty)")
            rows.append(row)
            lines.append(start)
            start = reader.line_num + 1
    except _csv.Error as exc:
        raise LogFormatError(f"malformed CSV: {exc}", path=src, where=f"line {reader.line_num}",
                             fix="check the quoting and delimiters on that line") from None
    warnings: list[str] = []
    kept = limit_columns(names, warnings, word="columns")
    index = {n: i for i, n in enumerate(names)}
    columns = {n: [row[index[n]] for row in rows] for n in kept}
    del rows
    table = Table(names=kept, lines=np.asarray(lines, dtype=np.int64), header=True, warnings=warnings)
    add_text_columns(table, columns)
    return table


def _check_header(names: list[str], src: str) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if not name:
            raise LogFormatError(f"column {i + 1} of the header has no name", path=src, where="line 1",
                                 fix="give every column a name")
        if name in seen:
            raise LogFormatError(f"column {name!r} appears twice in the header", path=src, where="line 1",
                                 fix="rename one of the two columns")
        seen.add(name)


def segments_of(table: Table) -> tuple[np.ndarray | None, list[str] | None]:
    """Segment number per row from a ``segment`` column (labels in order of first appearance)."""
    col = next((n for n in table.names if normalise(n) == SEGMENT_COLUMN), None)
    if col is None:
        return None, None
    densify(table, col)  # a label column that few rows fill may have been stored sparse
    if col in table.text:
        stored = table.text[col][0]
        # (a CSV's text columns are dense lists; the sparse {row: cell} form comes from JSON records)
        cells = stored if isinstance(stored, list) else [stored.get(r, "") for r in range(table.rows)]
    else:
        vals, present = table.numeric[col], table.present[col]
        cells = [("%g" % v) if p else "" for v, p in zip(vals.tolist(), present.tolist(), strict=True)]
    labels: dict[str, int] = {}
    ids = np.fromiter((labels.setdefault(c, len(labels)) for c in cells), dtype=np.int64, count=len(cells))
    table.text.pop(col, None)
    table.numeric.pop(col, None)
    table.present.pop(col, None)
    table.names = [n for n in table.names if n != col]
    return ids, [f"segment {label!r}" for label in labels]


def read(path: Path, *, root: Path | None = None, fast: bool = True):
    """Read one CSV/TSV log into an unstitched RunLog (one segment, or one per ``segment`` label).

    Args:
        path: the file.
        root: unused (the directory the user named).
        fast: use pyarrow when it is installed.

    Raises:
        LogFormatError: empty file, no step column, a non-numeric metric cell, ragged rows,
            duplicate or backward steps in one segment; the message names the line.
    """
    path = Path(path)
    table = read_table(path, fast=fast)
    segments, notes = segments_of(table)
    try:
        return to_runlog(table, path=path, format=NAME, segments=segments, segment_notes=notes)
    except LogFormatError as exc:
        if table.exact_lines:  # the line named is exact: no need to read the file again
            raise with_warnings(exc, table.warnings) from None
        return read(path, root=root, fast=False)  # the exact path names the precise line
