"""Fixed-width tables: a row's cells named by the header column above them, by position.

A table printer that pads every cell to its column's width (chainer's ``PrintReport``, whose rows
leave the ``validation/*`` cells blank except after an evaluation; a fastai or spaCy table with an
empty cell) prints rows with fewer numbers than its header has names. Counting cells then names
them wrongly or not at all; their place on the line does not lie: a cell belongs to the header
column it sits under. :func:`header_of` keeps where each name of a header line is;
:func:`cell_columns` gives each cell of a row the column whose name it overlaps (left-aligned
cells start under their name, right-aligned ones end under it), or the nearest one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .template import Template

_NAME = re.compile(r"[^\s,|]+")


@dataclass(frozen=True)
class Header:
    """A table header line: its column names and where each is printed."""

    names: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]
    """(start, end) character offsets of each name on the header line."""


def header_of(text: str, names: tuple[str, ...]) -> Header | None:
    """The spans of ``names`` (the header's words, in order) on ``text``; None if they are not found so."""
    spans = [(m.start(), m.end()) for m in _NAME.finditer(text)]
    found = tuple(text[a:b].strip("'\"") for a, b in spans)
    if found != names:
        return None
    return Header(names=names, spans=tuple(spans))


def two_row_names(top: str, top_names: tuple[str, ...], text: str, names: tuple[str, ...]) -> tuple[str, ...] | None:
    """The column names of a header printed on two rows (Vowpal Wabbit's ``example`` over ``counter``):
    each column named by its two words, when both rows have as many names and each pair overlaps on
    the line (a fixed-width table); None otherwise."""
    upper, lower = header_of(top, top_names), header_of(text, names)
    if upper is None or lower is None or len(top_names) != len(names):
        return None
    for (a, b), (c, d) in zip(upper.spans, lower.spans, strict=True):
        if min(b, d) <= max(a, c):
            return None
    return tuple(f"{x} {y}" for x, y in zip(top_names, names, strict=True))


def cell_columns(tpl: Template, pieces: list[str], header: Header) -> dict[int, int] | None:
    """Cell index -> header column for a row of ``tpl`` (``pieces``: its text/number split), or None
    when two cells would share a column or go out of order (not a row of this table)."""
    starts, at = [], 0
    for k, piece in enumerate(pieces):
        if k % 2:
            starts.append((at, at + len(piece)))
        at += len(piece)
    out: dict[int, int] = {}
    for pos, col, _slash in tpl.columns:
        if col in out:
            continue  # a cell "N/M": its first number places it
        a, b = starts[pos]
        out[col] = _nearest(a, b, header.spans)
    order = [out[c] for c in sorted(out)]
    if any(y <= x for x, y in zip(order, order[1:], strict=False)):
        return None
    return out


def _nearest(a: int, b: int, spans: tuple[tuple[int, int], ...]) -> int:
    """The column whose name overlaps [a, b) most; with no overlap, the one at the least distance."""
    def score(i: int) -> tuple[int, int]:
        s, e = spans[i]
        overlap = min(b, e) - max(a, s)
        return (-overlap, 0) if overlap > 0 else (1, max(s - b, a - e))
    return min(range(len(spans)), key=score)
