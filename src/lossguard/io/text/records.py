"""Lines -> records: each line's kept numbers, glued to the record header above it, in tables.

A record may be spread over lines: a header that holds only counters (OLMo-core's ``[step=N/M]``,
Composer's ``[batch=N/M]:``, Keras' ``Epoch 3/10``, a bare tqdm bar) followed by lines of metrics.
A line inherits the counters of the last header whose kinds it does not print itself, so Keras'
``100/100 [====] - loss: 0.12`` gets its epoch from ``Epoch 3/10`` and an HF Trainer dict gets the
step from the tqdm bar above it. Rows of the same labels (the same template, inherited counters
included) go to one :class:`Table`, stored as flat float arrays (no Python object per value).
"""
from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field
from typing import Iterable

from .crash import Crash, crash_step
from .boxes import Boxes
from .columns import Header, cell_columns, header_of, two_row_names
from .join import Joiner, vector_means
from .lines import iter_decoded  # noqa: F401 - re-exported: the sniffer and watch read through it
from .names import StepKind, is_ppl, loss_rank, step_kind
from .normalise import normalise, split_glued
from .overflow import Overflow, parse_overflow
from .template import SPLIT, Template, parse, with_header

MAX_TEMPLATES = 20_000
"""Distinct templates kept; past it, new ones are not tracked (a text that is no log, not a log's
lines): the memory of a scan stays bounded whatever the input."""
_TABLE_HEADER = re.compile(r"^\s*[A-Za-z_][\w/.%()-]*(?:(?:\s*[,\t|]\s*|\s+)[A-Za-z_][\w/.%()-]*){1,40}\s*[,|]?\s*$")
"""A line of column names only (``epoch  train_loss  valid_loss  accuracy  time``, a CSV header)."""
_HEADER_SPLIT = re.compile(r"\s*[,\t|]\s*|\s+")
MAX_SKELETONS = 50_000
"""Cached skeletons; the cache is emptied when it grows past this (progress bars redrawn with ever
new bar glyphs give a new skeleton per line, their templates are still few)."""


@dataclass(eq=False)
class Table:
    """All rows of one template (with the counters it inherited), in line order.

    Attributes:
        index: the table's number, in order of first appearance.
        labels: label of each column; inherited counters come first.
        kinds: counter kind of each column (None for a metric).
        totals: column -> total of the ``N/M`` counter in that column, as of its last row.
        data: row-major values, ``len(labels)`` per row.
        lines: the 1-based line number of each row.
        order: the row's place among every row read (``\r`` redraws share a line number, not a place).
        example: the first line of the table, as read (for ``--explain`` and messages).
        template: the template of the line's own numbers.
        inherited: how many leading columns are counters inherited from a record header.
        raw: the first line of the table as it was in the file (the fast path's model).
    """

    index: int
    labels: tuple[str, ...]
    kinds: tuple[StepKind | None, ...]
    template: Template
    example: str
    inherited: int = 0
    raw: str | None = None
    totals: dict[int, float] = field(default_factory=dict)
    data: array = field(default_factory=lambda: array("d"))
    lines: array = field(default_factory=lambda: array("q"))
    order: array = field(default_factory=lambda: array("q"))

    @property
    def rows(self) -> int:
        """Number of rows."""
        return len(self.lines)

    def column(self, j: int):
        """Column ``j`` as a float64 numpy array."""
        import numpy as np

        return np.frombuffer(self.data, dtype=np.float64).reshape(-1, len(self.labels))[:, j]


@dataclass
class Scan:
    """What a pass over the lines found."""

    tables: list[Table] = field(default_factory=list)
    crashes: list[Crash] = field(default_factory=list)
    lines: int = 0
    numeric_lines: int = 0
    vectors: int = 0
    """Values printed as arrays of numbers, read as their mean (:func:`.join.vector_means`)."""
    overflows: list[Overflow] = field(default_factory=list)
    """fp16 overflow lines (:mod:`.overflow`), in line order."""


class Scanner:
    """Feeds lines into a :class:`Scan`; keeps the header state between calls (``watch``)."""

    def __init__(self) -> None:
        self.scan = Scan()
        self._skeletons: dict[str, Template] = {}
        self._tables: dict[tuple, Table] = {}
        self._header: tuple[Template, list[float], list[tuple[int, float]]] | None = None
        self._pending: tuple | None = None  # a row that inherited a bar's counter, until the bar's next redraw
        self._joiner = Joiner()
        self._boxes = Boxes()
        self._names: tuple[str, ...] | None = None  # the last table header (column names) seen
        self._spans: Header | None = None  # where its names are printed (fixed-width tables)
        self._named: dict[tuple, Template] = {}
        self._above: tuple[str, tuple[str, ...]] | None = None  # the line before, when a row of names
        self._rank: int | None = None  # the lowest rank a "[rankN]:" prefix named so far
        self._last: Table | None = None  # the table of the last row read
        self._header_at = 0  # the place (``numeric_lines``) of the header in force
        self._follow: dict[tuple, tuple[tuple[int, int], ...]] = {}

    def feed(self, lines: Iterable[tuple[int, str]]) -> None:
        """Read ``(line number, text)`` pairs."""
        scan = self.scan
        push = self._joiner.push
        for number, raw in lines:
            scan.lines += 1
            text, rank = normalise(raw)
            if rank is not None:  # one rank's lines: the lowest seen (pipeline parallelism: only the last stage prints)
                if self._rank is None or rank < self._rank:
                    self._rank = rank
                elif rank > self._rank:
                    continue
            boxed = self._boxes.push(number, text)
            if boxed is not None:  # a row of a vertical key/value box (SB3): read when the box closes
                for first, record in boxed:
                    self._line(first, record, None)
                continue
            if "it/s" in text or "s/it" in text:
                parts = split_glued(text)
                if len(parts) > 1:  # a bar with a message glued after it: two lines
                    for part in parts:
                        for first, record in push(number, part):
                            self._line(first, record, None)
                    continue
            if self._joiner.pending or "[" in text or "{" in text:
                for first, record in push(number, text):
                    self._line(first, record, raw if record is text else None)
            else:
                self._line(number, text, raw)

    def finish(self) -> None:
        """Read what is still held: a record left open by the last lines (a bracket never closed)."""
        for first, record in self._joiner.flush() + self._boxes.flush():
            self._line(first, record, None)

    def _line(self, number: int, text: str, raw: str | None) -> None:
        """Read one line (or glued record) of normalised text; ``raw`` is the line as in the file,
        None when the text was glued or rewritten."""
        if "[" in text:
            text, vectors = vector_means(text)
            if vectors:
                self.scan.vectors += vectors
                raw = None
        pieces = SPLIT.split(text)
        above, self._above = self._above, None
        if len(pieces) < 3:
            return self._table_header(text, above) if _TABLE_HEADER.match(text) else None
        skeletons = self._skeletons
        skeleton = "\0".join(pieces[0::2])
        tpl = skeletons.get(skeleton)
        if tpl is None:
            if len(skeletons) > MAX_SKELETONS:
                skeletons.clear()
            tpl = skeletons[skeleton] = parse(pieces)
        if tpl.errorish:
            self._crash(number, text)
        if tpl.overflow:
            hit = parse_overflow(number, text)
            if hit is not None:
                self.scan.overflows.append(hit)
                return  # its "loss scale" is the scaler's, no series of its own
        if not tpl.kept:
            return
        if tpl.columns and self._names is not None:
            tpl = self._name_columns(tpl, self._names, pieces)
        nums = pieces[1::2]
        totals = [(j, float(nums[i])) for j, i in tpl.totals] if tpl.totals else ()
        table = self.record(tpl, [float(nums[i]) for i in tpl.kept], totals, number, text)
        if table is not None and table.raw is None and raw is not None:
            table.raw = raw

    def _table_header(self, text: str, above: tuple[str, tuple[str, ...]] | None) -> None:
        """Remember a line of column names when one names a counter or a loss (not any short prose);
        a header printed on two rows (``average`` over ``loss``) names each column by both words."""
        names = tuple(w for w in _HEADER_SPLIT.split(text.strip(" \t,|")) if w)
        self._above, spans = (text, names), header_of(text, names)
        if above is not None and spans is not None and (two := two_row_names(*above, text, names)) is not None:
            names, spans = two, Header(names=two, spans=spans.spans)
        if any(step_kind(w) is not None or loss_rank(w) is not None or is_ppl(w) for w in names):
            self._names, self._spans = names, spans

    def _name_columns(self, tpl: Template, names: tuple[str, ...], pieces: list[str]) -> Template:
        """A line of numbers under a table header (``names``): read by the header, cell by cell when it
        has as many columns, else by where each cell sits under the header (blank cells)."""
        key = (tpl, names)  # the template itself: an id could be reused after the cache empties
        if key not in self._named:
            named = with_header(tpl, names)
            if named is None and self._spans is not None:
                at = cell_columns(tpl, pieces, self._spans)
                named = with_header(tpl, names, at) if at is not None else None
            self._named[key] = named or tpl
        return self._named[key]

    def record(self, tpl: Template, values: list[float], totals, number: int, text: str) -> Table | None:
        """Add one line's kept ``values`` (``totals``: (kept index, total) of its ``N/M`` counters)
        under the record header in force."""
        scan = self.scan
        scan.numeric_lines += 1
        pending, self._pending = self._pending, None
        if tpl.header:
            if pending is not None and pending[0].key == tpl.key and number <= pending[1] + 2:
                # tqdm.write() prints a message (HF's dict) between two redraws of a progress bar; the
                # redraw right after it shows the counter at the time of the message (the one before lags).
                table, at, keep = pending[2], pending[3], pending[4]
                for k, j in enumerate(keep):
                    table.data[at + k] = values[j]
            self._header = (tpl, values, list(totals))
            self._header_at = scan.numeric_lines
        inherited: tuple = ()
        header = self._header
        if header is not None and not tpl.header:
            own = set(tpl.kinds)
            keep = [j for j, k in enumerate(header[0].kinds) if k not in own]
            if keep:
                inherited = (header[0].key, tuple(keep))
        key = (tpl.key, inherited)
        table = self._tables.get(key)
        if table is None:
            if len(self._tables) >= MAX_TEMPLATES:
                return None
            table = self._new_table(key, tpl, inherited, text, header)
        if inherited and header is not None:  # inherited only under a header
            hv = self._current(header)
            if _is_bar(header[0]):
                self._pending = (header[0], number, table, len(table.data), inherited[1])
            table.data.extend([hv[j] for j in inherited[1]])
            for j, total in header[2]:
                if j in inherited[1]:
                    table.totals[inherited[1].index(j)] = total
        table.data.extend(values)
        table.lines.append(number)
        table.order.append(scan.numeric_lines)
        self._last = table
        if totals:
            off = len(inherited[1]) if inherited else 0
            for j, total in totals:
                table.totals[off + j] = total
        return table

    def _current(self, header: tuple[Template, list[float], list[tuple[int, float]]]) -> list[float]:
        """The header's counters as of now: a later record printing the same counter (kind and label)
        moved it on. A tqdm bar is drawn bare (a header), then with its postfix (records, maybe read by
        the fast path); a ``tqdm.write`` message between redraws inherits the count as of then."""
        last, hv = self._last, header[1]
        if last is None or not last.order or last.order[-1] <= self._header_at:
            return hv
        pairs = self._follow.get(key := (last.index, header[0].key))
        if pairs is None:
            cols = {(lab, k): i for i, (lab, k) in enumerate(zip(last.labels, last.kinds, strict=True)) if k}
            pairs = self._follow[key] = tuple((j, cols[c]) for j, c in enumerate(
                zip(header[0].labels, header[0].kinds, strict=True)) if c[1] is not None and c in cols)
        row, current = len(last.data) - len(last.labels), list(hv)
        for j, col in pairs:
            current[j] = last.data[row + col]
        return current

    def _new_table(self, key: tuple, tpl: Template, inherited: tuple, text: str,
                   header: tuple[Template, list[float], list[tuple[int, float]]] | None) -> Table:
        labels, kinds = tpl.labels, tpl.kinds
        if inherited and header is not None:  # inherited only under a header
            head = header[0]
            labels = tuple(head.labels[j] for j in inherited[1]) + labels
            kinds = tuple(head.kinds[j] for j in inherited[1]) + kinds
        table = Table(index=len(self.scan.tables), labels=labels, kinds=kinds, template=tpl, example=text.strip()[:300],
                      inherited=len(inherited[1]) if inherited else 0)
        self._tables[key] = table
        self.scan.tables.append(table)
        return table

    def _crash(self, number: int, text: str) -> None:
        hit = crash_step(text)
        if hit is not None:
            self.scan.crashes.append(Crash(line=number, kind=hit[0], step=hit[1], text=text.strip()[:300]))


def _is_bar(tpl: Template) -> bool:
    """A bare progress bar: its only counter is an unlabelled ``N/M`` (tqdm's), no epoch header."""
    return bool(tpl.totals) and all(lab == "" for lab, k in zip(tpl.labels, tpl.kinds, strict=True) if k is not None)


def scan_lines(lines: Iterable[tuple[int, str]]) -> Scan:
    """One pass over ``(line number, text)`` pairs."""
    scanner = Scanner()
    scanner.feed(lines)
    scanner.finish()
    return scanner.scan
