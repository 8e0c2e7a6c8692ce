"""Which printed label is the training loss: the ranked loss names, the ones printed beside a counter
first, and the perplexity labels (training before evaluation) when no loss is printed."""
from __future__ import annotations

import numpy as np

from .names import fold, is_ppl, loss_rank
from .records import Table


def loss_candidates(tables: list[Table], *, min_rows: int = 1) -> list[tuple[int, int, str]]:
    """(rank, -rows, label) of every loss-like label printed on at least ``min_rows`` lines, best first
    (rows of every template that prints the label count: one series in several line shapes)."""
    rows: dict[str, int] = {}
    label_of: dict[str, str] = {}
    rank_of: dict[str, int] = {}  # the rank of label_of's label
    for t in tables:
        for lab, kind in zip(t.labels, t.kinds, strict=True):
            rank = loss_rank(lab) if kind is None else None
            if rank is not None:
                rows[fold(lab)] = rows.get(fold(lab), 0) + t.rows
                label_of.setdefault(fold(lab), lab)
                rank_of.setdefault(fold(lab), rank)
    return sorted((rank_of[k], -n, label_of[k]) for k, n in rows.items() if n >= min_rows)


def counted_first(tables: list[Table], ranked: list[str]) -> list[str]:
    """The loss labels printed beside a counter first, when one is on at least half as many lines as the
    best-ranked label: a ``(Loss: 101.5)`` in a warning glued after a bar does not beat the bar's own
    ``Batch Loss`` (the loss is chosen among the tables that carry a counter). Lines of one template
    printed back to back count once: they are parts of one step (darknet prints a ``total_loss`` per
    yolo layer, three lines, before its iteration line ``N: X, Y avg loss``)."""
    counted: dict[str, int] = {}
    rows: dict[str, int] = {}
    for t in tables:
        has_counter = any(k is not None for k in t.kinds[t.inherited:])  # its own, not a header's
        places = np.frombuffer(t.order, dtype=np.int64)
        blocks = 1 + int(np.sum(np.diff(places) > 1)) if len(places) else 0
        for lab, kind in zip(t.labels, t.kinds, strict=True):
            if kind is None:
                rows[fold(lab)] = rows.get(fold(lab), 0) + blocks
                if has_counter:
                    counted[fold(lab)] = counted.get(fold(lab), 0) + t.rows
    need = rows.get(fold(ranked[0]), 0) / 2
    first = [lab for lab in ranked if counted.get(fold(lab), 0) >= max(1, need)]
    return first + [lab for lab in ranked if lab not in first] if first else ranked


def ppl_labels(tables: list[Table]) -> list[str]:
    """The perplexity labels, the training series first: the one printed on most lines that do not
    name an evaluation (a training ``ppl`` every N steps beats ``eval dev: perplexity`` every 10N)."""
    train: dict[str, int] = {}
    label_of: dict[str, str] = {}
    for t in tables:
        for lab in t.labels:
            if is_ppl(lab):
                label_of.setdefault(fold(lab), lab)
                train[fold(lab)] = train.get(fold(lab), 0) + (0 if t.template.evaluation else t.rows)
    return [label_of[k] for k in sorted(label_of, key=lambda k: (-train[k], k))]
