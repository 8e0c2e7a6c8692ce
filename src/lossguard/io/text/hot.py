"""The hot line of a console log: the most frequent line's template turned into one whole-line pattern.

:func:`compile_hot` takes a template's first raw line and turns it into :class:`~.vector.Step` s: its
text literally (runs of spaces loosely), each number, kept numbers and counter totals captured. The
steps are read two ways from one definition: as a regex that matches one whole line (Python's ``re``)
and by :func:`lossguard.io.text.vector.match_block`, every line of a block at once. Both are checked
once against the template (the same numbers, in the same places) and not used if they disagree.
:mod:`lossguard.io.text.fast` reads the blocks of a file with them.
"""
from __future__ import annotations

import re

from .normalise import ANSI, normalise
from .records import Table
from .template import SPLIT
from .vector import Step, StepKind, match_block, merged

_NUMBER = r"([-+]?(?:\d++(?:\.\d*+)?|\.\d++)(?:[eE][-+]?\d++)?+|-?(?:[Nn][Aa][Nn]|[Ii]nfinity|[Ii]nf|INF))"
"""A kept number (possessive quantifiers: a number never gives back digits, so no backtracking)."""
_BLANKS = re.compile(r"([ \t]+)")
_CSI_GROUP = re.compile(r"(\x1b\[[0-9;?]*[ -/]*[@-~])")
_OTHER = r"(?:[-+]?(?:\d++(?:\.\d*+)?|\.\d++)(?:[eE][-+]?\d++)?+)"  # a number that is not kept: not captured


class HotLine:
    """The compiled line of one table: its regex captures the kept numbers (and counter totals).

    Attributes:
        table: the table whose rows the line adds to.
        regex: the whole line, anchored at a line start (multi-line mode).
        steps: the same line as steps for :func:`~.vector.match_block`, or None when they would
            not read the first line as the regex does.
        colored: the steps of the line with its colour codes as literal text, or None.
        kept: positions among the groups of the kept values, in order.
        totals: positions among the groups of the counters' totals, in template order.
        plain: every group is a kept value, in order (no reordering needed).
    """

    def __init__(self, table: Table, regex: re.Pattern, kept: list[int], totals: list[int],
                 steps: list[Step] | None = None) -> None:
        self.table = table
        self.regex = regex
        self.steps = steps
        self.colored: list[Step] | None = None  # the line with its colour codes as literals (see _colored)
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
    steps = _steps(pieces, kept, totals)
    try:
        regex = re.compile("^" + _regex(steps) + r"[ \t]*\n", re.M)
    except re.error:
        return None
    captured = sorted(set(kept) | set(totals))
    kept_at, totals_at = [captured.index(i) for i in kept], [captured.index(i) for i in totals]
    m = regex.match(raw.rstrip("\n") + "\n")
    if m is None or [m.groups()[k] for k in kept_at] != [nums[i] for i in kept]:
        return None
    values = [nums[i] for i in kept]
    hot = HotLine(table, regex, kept_at, totals_at, _checked(steps, raw, values, kept_at))
    hot.colored = _colored(table.raw or "", kept, totals, values, kept_at)
    return hot


def _steps(pieces: list[str], kept: list[int], totals: list[int], start: int = 0) -> list[Step]:
    """Steps of a line split into text and numbers: text literal (runs of spaces loose), kept
    numbers and totals captured, other numbers matched; ``start`` is the index of the first number."""
    steps = []
    nums = len(pieces) // 2
    for i, piece in enumerate(pieces[0::2]):
        if piece and not piece.strip() and 0 < i < nums:
            steps.append(Step(StepKind.GAP))
        else:
            for k, word in enumerate(_BLANKS.split(piece)):  # words at even places, blanks at odd ones
                steps.append(Step(StepKind.SPACES, word.encode()) if k % 2 else Step(StepKind.TEXT, word.encode()))
        if i < nums:
            steps.append(Step(StepKind.NUMBER, captured=start + i in kept or start + i in totals))
    return steps


def _regex(steps: list[Step]) -> str:
    """The regex of ``steps`` (possessive: a number or a run of spaces never gives back characters)."""
    out = {StepKind.SPACES: r"[ \t]*+", StepKind.GAP: r"[ \t]++"}
    return "".join(re.escape(s.text.decode()) if s.kind is StepKind.TEXT
                   else (_NUMBER if s.captured else _OTHER) if s.kind is StepKind.NUMBER
                   else out[s.kind] for s in steps)


def _checked(steps: list[Step], raw: str, values: list[str], kept_at: list[int]) -> list[Step] | None:
    """``steps`` merged, when :func:`~.vector.match_block` reads ``raw`` (one line) with ``values`` as its
    kept numbers; else None (the line is then read by its regex only)."""
    steps = merged(steps)
    data = (raw.rstrip("\n") + "\n").encode()
    ok, starts, ends = match_block(steps, data)
    if not ok.all():
        return None
    got = [data[a:b].decode() for a, b in zip(starts[0].tolist(), ends[0].tolist(), strict=True)]
    return steps if [got[k] for k in kept_at] == values else None


def _colored(raw: str, kept: list[int], totals: list[int], values: list[str], kept_at: list[int]) -> list[Step] | None:
    """The steps of a line printed with the same colour codes on every line, the codes matched as
    literal text: a block of such lines is read without removing the codes first (one pass over the
    text instead of two). None when the line has no codes or the steps would read other numbers
    than the template (checked by the regex and by :func:`~.vector.match_block`)."""
    raw = raw.rstrip("\n")
    if "\x1b" not in raw:
        return None
    pieces = _CSI_GROUP.split(raw)
    steps: list[Step] = []
    count = 0
    for k, seg in enumerate(pieces):
        if k % 2:
            steps.append(Step(StepKind.TEXT, seg.encode()))
            continue
        split = SPLIT.split(seg)
        steps += _steps(split, kept, totals, count)
        count += len(split) // 2
    try:
        regex = re.compile(_regex(steps) + r"[ \t]*\n")
    except re.error:
        return None
    m = regex.match(raw + "\n")
    if m is None or [m.groups()[k] for k in kept_at] != values:
        return None
    return _checked(steps, raw, values, kept_at)
