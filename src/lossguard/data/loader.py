"""ResumableLoader: a torch DataLoader over a ResumableSampler that stays exact with workers.

A DataLoader with workers draws indices from its batch sampler ahead of use (``prefetch_factor *
num_workers`` batches), so a sampler cannot know which batches the loop really trained on. This
wrapper commits a batch to the sampler when it hands it to the loop, and throws its DataLoader
iterator (and prefetched batches) away whenever the sampler's position is changed from outside
(``skip_batches``, ``seek``, ``load_state_dict`` on a rollback), restarting at the new position.

Worker seeds come from a private ``torch.Generator`` seeded from ``(sampler.seed, position)``, so
creating an iterator never draws from the global torch RNG: the training RNG stream (dropout) is
the same whether or not the run resumed mid-epoch.
"""
from __future__ import annotations

from typing import Any, Iterator

from ..errors import require
from .sampler import ResumableSampler


class ResumableLoader:
    """Iterate a map-style dataset in the order of a :class:`ResumableSampler`, exactly resumable.

    Args:
        dataset: a map-style dataset (``__getitem__`` by index).
        sampler: the sampler that owns the order and the position; checkpoint *it*
            (``TrainState(data=sampler)``).
        **dataloader_kwargs: passed to ``torch.utils.data.DataLoader`` (``num_workers``,
            ``collate_fn``, ``pin_memory``, ``persistent_workers``, ...); not ``batch_size``,
            ``shuffle``, ``sampler``, ``batch_sampler`` or ``drop_last``, which the sampler decides.
    """

    def __init__(self, dataset, sampler: ResumableSampler, **dataloader_kwargs: Any) -> None:
        from ..errors import ConfigError

        clash = sorted({"batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"} & set(dataloader_kwargs))
        if clash:
            raise ConfigError(f"ResumableLoader got {clash}, which the ResumableSampler decides",
                              fix="set batch_size/shuffle/drop_last on the ResumableSampler instead")
        torch = require("torch", "torch", "ResumableLoader")
        self.sampler = sampler
        sampler._deferred = True
        self._generator = dataloader_kwargs.pop("generator", None) or torch.Generator()
        self._loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, generator=self._generator,
                                                   **dataloader_kwargs)

    @property
    def position(self) -> int:
        """Global index of the next batch the loop will get."""
        return self.sampler.position

    def last_batch_ids(self) -> list[int]:
        """Sample ids of the batch most recently handed to the loop."""
        return self.sampler.last_batch_ids()

    def __len__(self) -> int:
        return len(self.sampler)

    def _epoch(self) -> Iterator[Any]:
        """The rest of the current epoch; returns early (without finishing it) on a skip or load."""
        s = self.sampler
        start = s.position
        self._generator.manual_seed(s.seed * 1_000_003 + start)
        version = s._stream_version  # a skip-list edit also voids prefetched batches
        it = iter(self._loader)
        try:
            for k, batch in enumerate(it):
                if s._stream_version != version:
                    if s._generation == version[0]:
                        s.seek(start + k)  # same position, batches fetched afresh without the listed samples
                    return
                s._commit(start + k + 1, s.batch_ids(start + k))
                yield batch
                if s._stream_version != version:  # skipped/rolled back/listed while holding the batch
                    if s._generation == version[0]:
                        s.seek(s.position)
                    return
        finally:
            del it  # shuts the workers down and drops prefetched batches

    def __iter__(self) -> Iterator[Any]:
        """One epoch, from the current position, like iterating a DataLoader.

        A skip or rollback inside the epoch continues from the new position within this loop as
        long as the new position is in the same epoch.
        """
        epoch = self.sampler.epoch
        while self.sampler.epoch == epoch:
            before = self.sampler.position
            yield from self._epoch()
            if self.sampler.position == before:  # nothing delivered and nothing changed: empty
                return

    def batches(self) -> Iterator[Any]:
        """Batches forever, across epochs (for loops counted in steps)."""
        while True:
            yield from self._epoch()
