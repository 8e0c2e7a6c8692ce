"""SkipRange: a range of data-stream batch indices to skip, half-open ``[start, stop)``.

One convention everywhere (the guard's ledger, its JSONL log, the analyser's plans and JSON):
``start`` is the first batch skipped, ``stop`` the first batch read again. In JSON a range is the
two-element list ``[start, stop]`` with the same half-open meaning; its length is ``stop - start``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import raise_all


@dataclass(frozen=True, kw_only=True)
class SkipRange:
    """Batches ``start <= index < stop`` are skipped (half-open)."""

    start: int
    """First batch index skipped."""
    stop: int
    """First batch index after the range (not skipped)."""

    def __post_init__(self) -> None:
        raise_all([] if 0 <= self.start <= self.stop else
                  [f"SkipRange needs 0 <= start <= stop, got start={self.start}, stop={self.stop}"],
                  fix="give the first skipped batch and the first batch read again")

    def __len__(self) -> int:
        return self.stop - self.start

    def __iter__(self):
        """``start, stop`` (so ``a, b = r`` works; ``b`` is exclusive)."""
        return iter((self.start, self.stop))

    def __getitem__(self, i: int) -> int:
        return (self.start, self.stop)[i]

    def __contains__(self, index: object) -> bool:
        return isinstance(index, int) and self.start <= index < self.stop

    def to_json(self) -> list[int]:
        """``[start, stop]`` (half-open)."""
        return [self.start, self.stop]

    @classmethod
    def from_json(cls, pair) -> "SkipRange":
        """The inverse of :meth:`to_json`."""
        a, b = pair
        return cls(start=int(a), stop=int(b))


def skip_to(ranges, index: int) -> int | None:
    """If ``index`` falls in one of ``ranges``, the first index after it (following chained ranges);
    else None."""
    end = None
    moved = True
    while moved:
        moved = False
        for r in ranges:
            cur = index if end is None else end
            if cur in r:
                end, moved = r.stop, True
    return end
