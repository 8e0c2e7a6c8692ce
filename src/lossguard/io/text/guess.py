"""A loss no label names: the lone value of a line that repeats, or a column of bare numbers.

When no value is labelled as a loss, the reader may still see the series: a bare ``tensor(2.3)``
print, a ``STEP LOSS`` pair (``76930 2.64``), rows of a CSV pasted without its header, the numbers of
``35000 35% (1m 4s) 2.31 ...`` (columns ``#1``, ``#2``). :func:`only_value` says which value that is
(with ``bare``, also rows of bare numbers that are not the most frequent line, e.g. under progress
bars); the choice is always announced by a warning (:mod:`.choose`).
"""
from __future__ import annotations

import re

import numpy as np

from .records import Table
from .total import total_column

MIN_GUESS_ROWS = 3
"""Rows a line needs before its only value is taken for the loss (no loss label anywhere)."""
_AUXILIARY = re.compile(r"(?i)(?:^|[\s/_.-])(?:time|data|lr|learning.rate|eta|elapsed|speed|fps|ips|throughput|mem\w*|"
                        r"gpu\w*|acc\w*|prec\w*|recall|f1|map\w*|iou|auc|score|tokens?|samples?|images?|words?|"
                        r"grad\w*|norm|scale|lambda|temp\w*|momentum|wd|batch.?size|size|seq\w*|"
                        r"rew\w*|return\w*|len\w*|success\w*|win\w*|epsilon|eps)(?:$|[\s/_.-])")
"""Labels of what a training line prints beside its loss (time, rates, accuracy, memory, sizes; an RL
episode's reward, return and length, which rise as training goes well)."""
STRIDE_MIN_ROWS = 4
"""Rows a named whole-number column needs, counting up by one constant stride, to be read as the step."""


def only_value(tables: list[Table], *, bare: bool = False) -> str | None:
    """The label of the only non-counter value of the most frequent line (a bare ``tensor(2.3)``
    print, a ``STEP LOSS`` pair), or None when that line holds several values or too few rows.

    With ``bare``, when the most frequent line gives none, the most frequent line of bare numbers
    (columns ``#1``, ``#2``...) is tried too: rows of unlabelled numbers under a few bars or headers
    are still the series (a CSV pasted without its header between progress bars)."""
    found = guessed_value(tables, bare=bare)
    return found[1] if found is not None else None


def guessed_value(tables: list[Table], *, bare: bool = False) -> tuple[Table, str] | None:
    """(table, label) of :func:`only_value`."""
    if not tables:
        return None
    t = max(tables, key=lambda t: t.rows)
    found = _value_of(t)
    if found is None and bare:
        rows = [u for u in tables if u is not t and u.labels and all(lab.startswith("#") for lab in u.labels)]
        if rows:
            t = max(rows, key=lambda u: u.rows)
            found = _value_of(t)
    return (t, found) if found is not None else None


def _value_of(t: Table) -> str | None:
    """:func:`only_value` for one table."""
    if t.rows < MIN_GUESS_ROWS:
        return None
    values = [j for j, k in enumerate(t.kinds) if k is None and not integral_increasing(t.column(j))
              and not _AUXILIARY.search(t.labels[j])]  # a lone "lr: 0.001" or "reward 12.5" is no loss
    if len(values) > 1 and any(k is not None for k in t.kinds) and not t.labels[0].startswith("#"):
        # A line with a counter and several named values, none named a loss (a GAN's "D_A: 0.2 G_A: 0.3"
        # after "(epoch: 1, iters: 100, time: 0.5, data: 0.01)"): the first value that names no
        # auxiliary quantity (time, rate, accuracy, memory...) is the series; announced by a warning.
        total = total_column(t, values)  # parts and their sum ("B: 3.4 | C: 2.9 | T: 6.3"): the sum is the loss
        values = [total] if total is not None else [j for j in values if not whole_finite(t.column(j))][:1]
    if len(values) != 1:
        if (len(values) > 1 and all(lab.startswith("#") for lab in t.labels)
                and any(integral_increasing(t.column(j)) for j in range(len(t.labels)))):
            # Columns of numbers only, one of them counting up (a CSV pasted without its header):
            # the first column of fractions after the counter is the loss.
            values = [j for j in values if not whole_finite(t.column(j))][:1]
        if len(values) != 1:
            return None
    v = t.column(values[0])
    if whole_finite(v):
        return None  # whole numbers (a year, a page, a count) are no loss
    return t.labels[values[0]]


def integral_increasing(values: np.ndarray) -> bool:
    """True for whole numbers that mostly go up (a restart or two may send them back)."""
    if not len(values) or not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
        return False
    d = np.diff(values)
    up, down = int((d > 0).sum()), int((d < 0).sum())
    return len(values) == 1 or (up >= 1 and down <= max(1, up // 10))


def whole_finite(v: np.ndarray) -> bool:
    """True when the finite values of a column are whole numbers (a count, a year: no loss)."""
    finite = v[np.isfinite(v)]
    return bool(len(finite)) and bool(np.all(finite == np.round(finite)))


def strided_counter(tables: list[Table]) -> str | None:
    """A named whole-number column of the loss lines that counts up by one constant stride on every
    line (``训练次数：100``, 200, 300...): the step, when no label names a counter. None when none does."""
    for t in sorted(tables, key=lambda u: -u.rows):
        for j, (lab, kind) in enumerate(zip(t.labels, t.kinds, strict=True)):
            if (kind is not None or lab.startswith("#") or t.rows < STRIDE_MIN_ROWS or _AUXILIARY.search(lab)
                    or j - t.inherited in t.template.percent):  # "complete [10%]": progress, not a count
                continue
            d = np.diff(t.column(j))
            if whole_finite(t.column(j)) and d[0] > 0 and np.all(d == d[0]):
                return lab
    return None
