"""The CSV fast path: pyarrow's parser over chunks of whole lines, errors named without a re-read.

Each chunk is parsed with the column names read once from the header. A row with the wrong number
of cells is caught by pyarrow's bad-row callback and reported at its line; a non-numeric cell is
found when the chunks are joined (:func:`lossguard.io._chunks.join_pieces`). Only when a chunk's
rows are not its lines one to one (blank lines, quoted newlines) or the bytes are not UTF-8 does the
caller fall back to the exact stdlib path.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import LogFormatError
from ._chunks import Piece, chunks, join_pieces, text_cells
from ._table import MAX_COLUMNS, Table, normalise, pandas_index


def arrow_column(col, pa) -> tuple[np.ndarray, np.ndarray] | None:
    """A numeric pyarrow column as (values, present) without needless copies; None if not numeric.

    Integer columns stay int64 (a step column is then used as is); a column without nulls gets a
    zero-memory all-True ``present`` view. The buffers are read with ``np.frombuffer`` because
    pyarrow's ``to_numpy`` imports pandas (half a second of CLI start-up) to check for it.
    """
    typ = col.type
    n = len(col)
    if pa.types.is_null(typ):
        return np.full(n, np.nan), np.zeros(n, dtype=bool)
    if not (pa.types.is_integer(typ) or pa.types.is_floating(typ)):
        return None
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    dtype: np.dtype
    if pa.types.is_int64(arr.type):
        dtype = np.dtype(np.int64)
    else:
        dtype = np.dtype(np.float64)
        if not pa.types.is_float64(arr.type):
            arr = arr.cast(pa.float64())
    values = np.frombuffer(arr.buffers()[1], dtype=dtype, count=n, offset=arr.offset * dtype.itemsize).copy()
    if arr.null_count == 0:
        return values, np.broadcast_to(np.True_, n)
    bits = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
    present = np.unpackbits(bits, bitorder="little")[arr.offset:arr.offset + n].astype(bool)
    values = values.astype(np.float64, copy=False)
    values[~present] = np.nan
    return values, present


def read_arrow(path: Path, delimiter: str, limit: int | None = None, *,
               keep_text: tuple[str, ...] = ()) -> Table | None:
    """pyarrow fast path; None when pyarrow is missing or anything about the file needs the exact path.

    Raises:
        LogFormatError: a row with the wrong number of cells, at its exact line (found without
            re-reading the file).
    """
    try:
        return _arrow_table(path, delimiter, limit, keep_text)
    except LogFormatError:
        raise
    except Exception:  # noqa: BLE001 - pyarrow rejects odd bytes in many ways; the exact path explains them
        return None


def _arrow_table(path: Path, delimiter: str, limit: int | None, keep_text: tuple[str, ...]) -> Table | None:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    # Parsed in 4 MB chunks of whole lines (read into one reused buffer, column names given once),
    # so that peak memory stays nearer the output arrays than one read_csv of the whole file. Where
    # a chunk's rows are its lines one to one, row line numbers are exact; otherwise (blank lines,
    # quoted newlines) they are approximate and an error is re-derived on the exact path.
    bad_rows: list = []

    def on_bad_row(row) -> str:
        if row.text.strip():
            bad_rows.append(row)
        return "skip"

    parse = pacsv.ParseOptions(delimiter=delimiter, invalid_row_handler=on_bad_row)
    convert = pacsv.ConvertOptions(null_values=[""], strings_can_be_null=True, true_values=[], false_values=[])
    pieces: list[Piece] = []
    names: list[str] | None = None
    read = None
    for chunk in chunks(path, skip_first_line=True, limit=limit):
        if names is None:  # the header is parsed once; every block is then read with these names
            names = [str(n) for n in pacsv.read_csv(pa.BufferReader(chunk.header),
                                                   read_options=pacsv.ReadOptions(use_threads=False),
                                                   parse_options=pacsv.ParseOptions(delimiter=delimiter)).column_names]
            names = pandas_index(names)
            if len(set(names)) != len(names) or any(not n for n in names) or len(names) > MAX_COLUMNS:
                return None
            # One thread: the bad-row callback is Python, and pyarrow's worker threads calling into it
            # made the process crash at exit (SIGSEGV/abort, about 1 run in 30 under load; pyarrow 26).
            read = pacsv.ReadOptions(column_names=names, use_threads=False)
        try:  # pyarrow's bad-row callback cannot show bytes that are not UTF-8; the exact path explains them
            str(chunk.data, "utf-8")
        except UnicodeDecodeError:
            return None
        t = pacsv.read_csv(pa.BufferReader(pa.py_buffer(chunk.data)), read_options=read, parse_options=parse,
                           convert_options=convert)
        if bad_rows:
            _raise_ragged(path, chunk, bad_rows[0], len(names))
        piece = Piece(rows=t.num_rows, lines=chunk.row_lines(t.num_rows))
        for name, col in zip(names, t.columns, strict=True):
            parsed = arrow_column(col, pa)
            if parsed is None:
                piece.text[name] = text_cells(col.to_pylist())
            else:
                piece.numeric[name], piece.present[name] = parsed
        del t
        pieces.append(piece)
    if names is None:
        return None  # header only: the exact path explains
    total = sum(p.rows for p in pieces)
    exact = all(p.lines is not None for p in pieces)  # then join_pieces fills the exact lines
    table = Table(names=[], lines=np.zeros(0, dtype=np.int64) if exact else np.arange(2, total + 2, dtype=np.int64),
                  header=True, exact_lines=False)
    labels = tuple(n for n in names if normalise(n) in keep_text)
    return join_pieces(pieces, names, table, keep_text=labels)


def _raise_ragged(path: Path, chunk, row, width: int) -> None:
    """Report a row with the wrong number of cells at its line (found by its text inside the chunk)."""
    data = bytes(chunk.data)
    at = data.find(row.text.encode("utf-8", "surrogateescape"))
    if at < 0 or b'"' in data[:at]:
        raise _Inexact()  # a quoted field may hide newlines: the exact path counts lines
    line = chunk.first_line + data.count(b"\n", 0, at)
    raise LogFormatError(f"{row.actual_columns} fields where the header has {width}", path=str(path),
                         where=f"line {line}",
                         fix="every row needs one cell per header column (leave missing ones empty)")


class _Inexact(Exception):
    """The fast path cannot name the line exactly: let the exact path read the file."""
