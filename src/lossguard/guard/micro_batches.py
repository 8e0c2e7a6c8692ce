"""The micro-batches of one optimizer step (gradient accumulation), named as one batch.

A framework that accumulates gradients runs several forwards per optimizer step; the guard judges
the step, so naming must cover every micro-batch. :class:`MicroBatches` holds them (references);
rows are numbered across the micro-batches in order. The gradient bisection's first level is then
the micro-batches themselves (a per-micro-batch gradient norm each), and it cuts only inside one.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence


class MicroBatches:
    """The micro-batches of one step, in the order they ran.

    Args:
        parts: the micro-batches (each as the model's per-row loss function takes it).
    """

    def __init__(self, parts: Sequence[Any]) -> None:
        self.parts = list(parts)
        self.sizes: list[int] = []

    def measure(self, module, fn: Callable) -> list[float]:
        """Per-row losses of every micro-batch (no autograd), concatenated; records the sizes."""
        from .attribution import per_sample_losses

        out: list[float] = []
        self.sizes = []
        for p in self.parts:
            rows = per_sample_losses(module, p, fn)
            self.sizes.append(len(rows))
            out += rows
        return out

    def ranges(self) -> list[list[int]]:
        """Global row numbers of each micro-batch (after :meth:`measure`)."""
        out, at = [], 0
        for n in self.sizes:
            out.append(list(range(at, at + n)))
            at += n
        return out

    def ids(self, ids_of: Callable[[Any], list]) -> list[int]:
        """Sample ids of every row, micro-batch by micro-batch."""
        return [int(i) for p in self.parts for i in ids_of(p)]

    def selector(self, select: Callable[[Any, list], Any]) -> Callable[[Any, list], Any]:
        """``select(self, rows)`` for global rows that all lie in one micro-batch."""
        def pick(_batch, rows):
            at = 0
            for p, n in zip(self.parts, self.sizes, strict=True):
                if rows[0] < at + n:
                    local = [r - at for r in rows]
                    if min(local) < 0 or max(local) >= n:
                        raise ValueError("rows span micro-batches")
                    return p if local == list(range(n)) else select(p, local)
                at += n
            raise IndexError(f"row {rows[0]} beyond the step's {at} rows")
        return pick
