"""The guarded loop's place in the data stream: which batch is in flight, and the ranges to skip.

:meth:`StabilityGuard.batches` draws its batches through a :class:`DataFeed`. With a sampler (e.g.
:class:`~lossguard.data.sampler.ResumableSampler`) the sampler is the data position: a skip is
O(1) and a rollback rewinds it. Without one the feed counts the batches drawn itself; the stream is
then not rewound by a rollback, and a skipped range is drawn and discarded.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from ..data.iterate import iter_rng_neutral


class DataFeed:
    """Draws batches for the guard, skipping the ledger's data ranges.

    Args:
        sampler: the data position (anything with ``position`` and ``skip_batches(n)``), or None.
        capture_rng: capture the torch RNG as each batch is drawn (for the replay check and for
            naming a withheld batch's samples, which re-run it).
    """

    def __init__(self, sampler: Any, *, capture_rng: bool) -> None:
        self.sampler = sampler
        self.capture_rng = capture_rng
        self.count = 0
        """Batches drawn from the stream (the data position without a sampler; timeline state)."""
        self.batch_index = 0
        """Data-stream index of the batch in flight."""
        self.rng: Any = None
        """The torch RNG state when the batch in flight was drawn (None unless ``capture_rng``)."""
        self.batch: Any = None
        """The batch in flight (a reference, for naming its samples)."""
        self.reiterate = False
        """The loader's iterator must be re-created (after a rollback or a restore)."""

    def next_index(self) -> int:
        """Data-stream index of the next batch to draw."""
        return int(self.sampler.position) if self.sampler is not None else self.count

    def step_meta(self, step: int, *, lr: float, loss_scale: float, replay: Any, replayable: bool) -> dict[str, Any]:
        """What the host side needs to know about the step that used the batch in flight (the
        batch, its RNG and the ``replay`` callable only when ``replayable``)."""
        return {"step": step, "batch_index": self.batch_index, "lr": lr, "loss_scale": loss_scale, "rng": self.rng,
                "replay": replay if replayable else None, "batch": self.batch if replayable else None}

    def iterate(self, loader: Iterable, *, more: Callable[[], bool], skip_to: Callable[[int], int | None] | None,
                endless: bool) -> Iterator[Any]:
        """Yield batches from ``loader`` while ``more()``.

        Args:
            loader: any iterable of batches.
            more: asked before each batch; False ends the loop.
            skip_to: the end of the skipped range holding a batch index, or None (not skipped);
                None instead of a function: skip nothing.
            endless: re-iterate ``loader`` at its end (else one pass).
        """
        it = iter_rng_neutral(loader)
        while more():
            if self.reiterate:
                it, self.reiterate = iter_rng_neutral(loader), False
            end = None if skip_to is None else skip_to(self.next_index())
            if end is not None:
                n = end - self.next_index()
                if self.sampler is not None:
                    self.sampler.skip_batches(n)
                    it = iter_rng_neutral(loader)
                else:
                    for _ in range(n):
                        if next(it, StopIteration) is StopIteration:
                            it = iter_rng_neutral(loader)
                    self.count += n
            batch = next(it, StopIteration)
            if batch is StopIteration:
                if not endless:
                    break
                it = iter_rng_neutral(loader)
                batch = next(it, StopIteration)
                if batch is StopIteration:
                    break
            self.batch_index = int(self.sampler.position) - 1 if self.sampler is not None else self.count
            self.count += 1
            if self.capture_rng:
                from .replay import capture_torch_rng
                self.rng = capture_torch_rng()
            self.batch = batch
            yield batch
