"""Epoch summaries: a loss line that prints only a coarser counter than the records beside it.

Many scripts print the loss every few batches (``Epoch 3 Batch 500 Loss 1.92``) and again at the end of
the epoch (``Epoch 3 Loss 2.11 Accuracy 0.17``): the second line is the epoch's mean, not one more
record, and read in order it would be a point between two epochs' batches, far above or below them.
:func:`summary_tables` finds such lines: a loss table whose counters are a strict subset of those
of another loss table with more rows (an epoch beside epoch *and* batch).
"""
from __future__ import annotations

from .records import Table


def summary_tables(tables: list[Table]) -> list[Table]:
    """The tables of ``tables`` (all printing the loss) that are summaries of another one's records."""
    kinds = [frozenset(k for k in t.kinds if k is not None) for t in tables]
    out = []
    for t, mine in zip(tables, kinds, strict=True):
        if mine and any(mine < other and u.rows > t.rows for u, other in zip(tables, kinds, strict=True)):
            out.append(t)
    return out
