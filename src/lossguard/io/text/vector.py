"""The hot line matched against every line of a block at once, with numpy instead of a regex per line.

A hot line (:mod:`.hot`) is a fixed sequence of :class:`Step`: literal text, runs of spaces or tabs,
and numbers. :func:`match_block` walks that sequence over all lines of a block together (one numpy
operation per step, not one regex call per line) and returns, for each line, whether it matched and
the numbers it captured.

The walk takes, at every step, the choice a backtracking regex engine tries first (a run of spaces or
digits as long as it goes, a sign, fraction or exponent whenever one is there). When that path
reaches the end of the line, it is the match Python's ``re`` returns for the same line with the
hot line's regex, so the numbers are the same. When it does not (a ``nan`` where a number is
expected, a literal that differs, an exponent the regex would have to give back), the line is only
reported as not matched: the caller gives it to the regex, then to the line-by-line grammar, so no
line is read differently, only fewer lines are read fast. Works on UTF-8 bytes: literal text
matches its encoding, spaces, digits, signs and exponents are ASCII.

Memory: a padded copy of the block and a few integer arrays of one entry per line of it.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

LONGEST_RUN = 64
"""Longest run of digits, or of blanks, read here; a line with a longer one is left to the regex."""


class StepKind(enum.Enum):
    """What one step of a hot line matches."""

    TEXT = "text"
    """The literal bytes of :attr:`Step.text`."""
    SPACES = "spaces"
    """Any run of spaces and tabs, possibly empty (``[ \\t]*+``); :attr:`Step.text` is the run as printed."""
    GAP = "gap"
    """A run of at least one space or tab (``[ \\t]++``: the blank between two numbers)."""
    NUMBER = "number"
    """A decimal number: optional sign, digits with optional fraction (or ``.digits``), optional exponent."""


@dataclass(frozen=True)
class Step:
    """One step of a hot line.

    Attributes:
        kind: what it matches.
        text: the literal (UTF-8) of a TEXT step; the blanks as printed in the model line for SPACES.
        captured: a NUMBER whose value is kept (captured by the regex), not only matched.
    """

    kind: StepKind
    text: bytes = b""
    captured: bool = False


def merged(steps: list[Step]) -> list[Step]:
    """``steps`` with consecutive TEXT steps joined, and the blanks between two words taken as
    printed in the model line (one compare instead of three steps). A line whose blanks there
    differ is not matched here, and is read by the regex instead: the loose blanks of the regex
    stay loose, only the fast path is narrower. Blanks next to a number (padding) stay loose."""
    out: list[Step] = []
    steps = [s for s in steps if s.kind is not StepKind.TEXT or s.text]
    for k, step in enumerate(steps):
        if (step.kind is StepKind.SPACES and step.text and 0 < k < len(steps) - 1
                and steps[k - 1].kind is StepKind.TEXT and steps[k + 1].kind is StepKind.TEXT):
            step = Step(StepKind.TEXT, step.text)
        if step.kind is StepKind.TEXT and out and out[-1].kind is StepKind.TEXT:
            out[-1] = Step(StepKind.TEXT, out[-1].text + step.text)
        else:
            out.append(step)
    return out


class _Block:
    """One block's bytes, padded so that every read past the last line stays in bounds."""

    def __init__(self, data: bytes, longest: int) -> None:
        buf = np.frombuffer(data, dtype=np.uint8)
        self.size = len(buf)
        self.bytes = np.zeros(len(buf) + longest + 2 * LONGEST_RUN + 16, dtype=np.uint8)
        self.bytes[:len(buf)] = buf
        # the 8 bytes from each position as one little-endian integer (an unaligned view, no copy)
        self.words = np.ndarray(shape=(len(self.bytes) - 7,), dtype="<u8", buffer=self.bytes, strides=(1,))

    def at(self, pos: np.ndarray) -> np.ndarray:
        """The byte at each position."""
        return self.bytes[pos]

    def equals(self, pos: np.ndarray, text: bytes) -> np.ndarray:
        """Whether ``text`` stands at each position (compared 8 bytes at a time)."""
        ok = np.ones(len(pos), dtype=bool)
        for k in range(0, len(text), 8):
            chunk = text[k:k + 8]
            value = np.uint64(int.from_bytes(chunk, "little"))
            word = self.words[pos + k]
            if len(chunk) < 8:
                word = word & np.uint64((1 << (8 * len(chunk))) - 1)
            ok &= word == value
        return ok

    def run(self, pos: np.ndarray, digits: bool) -> np.ndarray:
        """Length of the run of ASCII digits (or of spaces and tabs) at each position; -1 past
        :data:`LONGEST_RUN`."""
        end = pos
        for _ in range(LONGEST_RUN + 1):
            b = self.bytes[end]
            more = (b - 48) < 10 if digits else (b == 32) | (b == 9)
            if not more.any():
                return end - pos
            end = end + more
        length = end - pos
        length[more] = -1
        return length


def match_block(steps: list[Step], data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Match every line of ``data`` (whole lines, each ending with ``\\n``) against ``steps``.

    Returns:
        ``(matched, starts, ends)``: ``matched`` a bool per line; ``starts`` and ``ends`` the byte
        offsets in ``data`` of each captured number, shape (matched lines, captured numbers), in the
        order the numbers stand in the line.
    """
    block = _Block(data, max([len(s.text) for s in steps] + [0]))
    ends_of_lines = np.flatnonzero(block.bytes[:block.size] == 10)
    n = len(ends_of_lines)
    starts_of_lines = np.zeros(n, dtype=np.int64)
    starts_of_lines[1:] = ends_of_lines[:-1] + 1
    # the lines still followed (a line shorter than the shortest match never is: a block of empty
    # lines costs no more than its text); once most have failed, only the others are kept
    shortest = sum(len(s.text) if s.kind is StepKind.TEXT else s.kind is not StepKind.SPACES for s in steps)
    rows = np.flatnonzero(ends_of_lines - starts_of_lines >= shortest)
    pos = starts_of_lines[rows]
    del ends_of_lines, starts_of_lines
    ok = np.ones(len(rows), dtype=bool)
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    for step in steps:
        pos = np.minimum(pos, block.size)  # a failed line may walk past the end (not in place: ends keep it)
        if step.kind is StepKind.TEXT:
            ok &= block.equals(pos, step.text)
            pos = pos + len(step.text)
        elif step.kind is StepKind.NUMBER:
            start = pos
            pos, good = _number(block, pos, words=step.captured)
            ok &= good
            if step.captured:
                starts.append(start)
                ends.append(pos)
        else:
            length = block.run(pos, digits=False)
            ok &= length >= (1 if step.kind is StepKind.GAP else 0)
            pos = pos + np.maximum(length, 0)
        if 2 * np.count_nonzero(ok) < len(ok):  # memory and work follow the lines that may still match
            keep = ok
            rows, pos, ok = rows[keep], pos[keep], ok[keep]
            starts, ends = [a[keep] for a in starts], [a[keep] for a in ends]
    pos = np.minimum(pos, block.size)
    length = block.run(pos, digits=False)  # the regex ends with [ \\t]*\\n
    ok &= (length >= 0) & (block.at(pos + np.maximum(length, 0)) == 10)
    matched = np.zeros(n, dtype=bool)
    matched[rows[ok]] = True
    if not starts:
        empty = np.zeros((int(ok.sum()), 0), dtype=np.int64)
        return matched, empty, empty
    return matched, np.stack(starts, axis=1)[ok], np.stack(ends, axis=1)[ok]


def _number(block: _Block, pos: np.ndarray, words: bool) -> tuple[np.ndarray, np.ndarray]:
    """The end of the number at each position, and whether one is there (the regex's first choice:
    ``[-+]?(?:\\d++(?:\\.\\d*+)?|\\.\\d++)(?:[eE][-+]?\\d++)?+``, and for a kept number ``nan``, ``inf``
    and ``Infinity``, which the regex tries only where that fails)."""
    c = block.at(pos)
    p = pos + ((c == 43) | (c == 45))  # a sign
    whole = block.run(p, digits=True)
    good = whole > 0
    end = p + np.maximum(whole, 0)
    dot = block.at(end) == 46
    if dot.any():  # ".digits*" after digits, or ".digits+" alone
        rows = np.flatnonzero(dot & (whole >= 0))
        frac = block.run(end[rows] + 1, digits=True)
        alone = whole[rows] == 0
        good[rows] = (frac >= 0) & (~alone | (frac > 0))
        end[rows] += 1 + np.maximum(frac, 0)
    e = block.at(end)
    e = (e == 101) | (e == 69)
    if e.any():  # an exponent, taken when digits follow (after an optional sign)
        rows = np.flatnonzero(e)
        s = block.at(end[rows] + 1)
        q = end[rows] + 1 + ((s == 43) | (s == 45))
        digits = block.run(q, digits=True)
        good[rows] &= digits >= 0
        end[rows] = np.where(digits > 0, q + digits, end[rows])
    if words and not good.all():  # -?(?:[Nn][Aa][Nn]|[Ii]nfinity|[Ii]nf|INF), where no digits are
        rows = np.flatnonzero(~good & (whole == 0))
        at = pos[rows] + (c[rows] == 45)
        size = _word(block, at)
        good[rows] = size > 0
        end[rows] = at + size
    return end, good


def _word(block: _Block, at: np.ndarray) -> np.ndarray:
    """Length of the non-finite value at each position (``nan`` in any case, ``inf``, ``Inf``,
    ``infinity``, ``Infinity``, ``INF``), 0 where none is."""
    b = [block.at(at + k) for k in range(3)]
    lower = [x | 32 for x in b]  # ASCII letters folded to lower case
    nan = (lower[0] == 110) & (lower[1] == 97) & (lower[2] == 110)
    inf = (lower[0] == 105) & (b[1] == 110) & (b[2] == 102)  # [Ii]nf: only the first letter in either case
    infinity = inf & block.equals(at + 3, b"inity")
    upper = (b[0] == 73) & (b[1] == 78) & (b[2] == 70)  # INF
    return np.where(infinity, 8, np.where(nan | inf | upper, 3, 0))
