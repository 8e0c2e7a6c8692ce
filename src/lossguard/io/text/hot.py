"""The hot line of a console log: the most frequent line's template turned into one whole-line regex.

:func:`compile_hot` takes a template's first raw line and builds a regex that matches the whole
line: its text literally (runs of spaces loosely), each kept number and counter total as a group,
other numbers matched but not captured. The regex is checked once against the template (the same
numbers, in the same places) and is not used if it disagrees. :mod:`lossguard.io.text.fast` searches
the blocks of a file with it.
"""
from __future__ import annotations

import re

from .normalise import ANSI, normalise
from .records import Table
from .template import SPLIT

_NUMBER = r"([-+]?(?:\d++(?:\.\d*+)?|\.\d++)(?:[eE][-+]?\d++)?+|-?(?:[Nn][Aa][Nn]|[Ii]nfinity|[Ii]nf|INF))"
"""A kept number (possessive quantifiers: a number never gives back digits, so no backtracking)."""
_SPACE = re.compile(r"[ \t]+")
_CSI_GROUP = re.compile(r"(\x1b\[[0-9;?]*[ -/]*[@-~])")



_OTHER = r"(?:[-+]?(?:\d++(?:\.\d*+)?|\.\d++)(?:[eE][-+]?\d++)?+)"  # a number that is not kept: not captured


class HotLine:
    """The compiled line of one table: its regex captures the kept numbers (and counter totals).

    Attributes:
        table: the table whose rows the line adds to.
        regex: the whole line, anchored at a line start (multi-line mode).
        bulk: the same without the anchor when the line starts with literal text (faster to search).
        colored: the line with its colour codes as literal text, or None.
        kept: positions among the groups of the kept values, in order.
        totals: positions among the groups of the counters' totals, in template order.
        plain: every group is a kept value, in order (no reordering needed).
    """

    def __init__(self, table: Table, regex: re.Pattern, kept: list[int], totals: list[int],
                 bulk: re.Pattern | None = None) -> None:
        self.table = table
        self.regex = regex
        # For whole blocks of hot lines: the same regex without the line anchor when the line starts
        # with literal text, so the regex engine jumps between lines by a fast search for that text
        # (with "^" it tries a match at every character). A block is read in bulk only when it
        # yields one match per line, each ending at a newline.
        self.bulk = bulk or regex
        self.colored: re.Pattern | None = None  # the line with its colour codes as literals (see _colored)
        self.kept = kept  # positions among the groups of the kept values, in order
        self.totals = totals  # positions among the groups of the counters' totals, in template order
        self.plain = kept == list(range(len(kept)))  # every group is a kept value: no reordering


def compile_hot(table: Table) -> HotLine | None:
    """The whole-line regex of a table's first raw line, or None when it would not read it as the template."""
    raw = ANSI.sub("", table.raw or "")
    if not raw or "\r" in raw or "`" in raw:
        return None
    text, rank = normalise(raw)
    if rank:
        return None
    pieces, message = SPLIT.split(raw), SPLIT.split(text)
    nums, mnums = pieces[1::2], message[1::2]
    offset = len(nums) - len(mnums)
    if offset < 0 or nums[offset:] != mnums:
        return None  # the prefix cut through a number: not a plain prefix
    tpl = table.template
    kept = [offset + i for i in tpl.kept]
    totals = [offset + i for _, i in tpl.totals]
    parts = _parts(pieces, kept, totals)
    try:
        regex = re.compile("^" + "".join(parts) + r"[ \t]*\n", re.M)
    except re.error:
        return None
    captured = sorted(set(kept) | set(totals))
    kept_at, totals_at = [captured.index(i) for i in kept], [captured.index(i) for i in totals]
    m = regex.match(raw.rstrip("\n") + "\n")
    if m is None or [m.groups()[k] for k in kept_at] != [nums[i] for i in kept]:
        return None
    bulk = None
    if parts[0] and not parts[0].startswith("[ \\t]") and pieces[0][:1].strip():
        bulk = re.compile("".join(parts) + r"[ \t]*\n")
    hot = HotLine(table, regex, kept_at, totals_at, bulk)
    hot.colored = _colored(table.raw or "", kept, totals, [nums[i] for i in kept], kept_at)
    return hot


def _parts(pieces: list[str], kept: list[int], totals: list[int], start: int = 0) -> list[str]:
    """Regex parts of a line split into text and numbers: text literal (runs of spaces loose), kept
    numbers and totals captured, other numbers matched; ``start`` is the index of the first number."""
    parts = []
    nums = len(pieces) // 2
    for i, piece in enumerate(pieces[0::2]):
        if piece and not piece.strip() and 0 < i < nums:
            parts.append(r"[ \t]++")
        else:
            parts.append(r"[ \t]*+".join(re.escape(w) for w in _SPACE.split(piece)))
        if i < nums:
            parts.append(_NUMBER if start + i in kept or start + i in totals else _OTHER)
    return parts


def _colored(raw: str, kept: list[int], totals: list[int], values: list[str], kept_at: list[int]) -> re.Pattern | None:
    """The whole-line regex of a line printed with the same colour codes on every line, the codes
    matched as literal text: a block of such lines is read without removing the codes first (one
    pass over the text instead of two). None when the line has no codes or the regex would read
    other numbers than the template."""
    raw = raw.rstrip("\n")
    if "\x1b" not in raw:
        return None
    pieces = _CSI_GROUP.split(raw)
    parts: list[str] = []
    count = 0
    for k, seg in enumerate(pieces):
        if k % 2:
            parts.append(re.escape(seg))
            continue
        split = SPLIT.split(seg)
        parts += _parts(split, kept, totals, count)
        count += len(split) // 2
    try:
        regex = re.compile("".join(parts) + r"[ \t]*\n")
    except re.error:
        return None
    m = regex.match(raw + "\n")
    if m is None or [m.groups()[k] for k in kept_at] != values:
        return None
    return regex
