"""Exact resume for data that is not index-addressable: torchdata's ``StatefulDataLoader``, traps handled.

For map-style data prefer :class:`lossguard.data.sampler.ResumableSampler` (O(1) skips, provenance
from the position alone). For an ``IterableDataset`` (streams, shards), or a loader you already
have, torchdata's ``StatefulDataLoader`` saves the sampler's and every worker's position and resumes
mid-epoch. :func:`stateful_loader` builds one with these traps avoided:

1. *One generator shared by sampler and loader.* ``StatefulDataLoader(shuffle=True, generator=g)``
   gives ``g`` to its RandomSampler **and** draws the workers' base seed from it. With
   ``num_workers=0`` the two uses interleave differently after a resume, so the next epoch's shuffle
   differs. Here the sampler and the loader each get their own generator.
2. *Global RNG consumed by ``iter(loader)``.* Without a ``generator`` a DataLoader draws its seeds
   from the global torch RNG each time an iterator is created, so restoring the global RNG and then
   creating the iterator leaves the training RNG one draw off. Here the loader has a private
   generator, so the order of "restore RNG" and ``iter(loader)`` does not matter; with your own
   loader, restore the global RNG only after ``iter(loader)`` exists.
3. *Per-sample randomness from a worker's global RNG.* Which worker loads which sample changes
   when a run resumes mid-epoch; draw augmentation randomness from ``(seed, sample index)``.

Resume: build the loader the same way, ``loader.load_state_dict(saved)``, then iterate (the
``TrainState(data=loader)`` does the load).
"""
from __future__ import annotations

from typing import Any

from ..errors import ConfigError, require


def stateful_loader(dataset, *, batch_size: int, seed: int, shuffle: bool = True, drop_last: bool = True,
                    num_workers: int = 0, **kwargs: Any):
    """A torchdata ``StatefulDataLoader`` whose shuffle and worker seeds are private to it.

    Args:
        dataset: a map-style dataset or an ``IterableDataset`` (which shards itself across workers
            with ``torch.utils.data.get_worker_info()``; give it ``state_dict``/``load_state_dict``
            for a fast resume, or StatefulDataLoader replays and discards what was consumed).
        batch_size: samples per batch.
        seed: seeds the sampler's shuffle (``seed``) and the workers' base seed (``seed + 1``).
        shuffle: shuffle a map-style dataset each epoch (ignored for iterable data).
        drop_last: drop the last incomplete batch.
        num_workers: worker processes.
        **kwargs: other ``StatefulDataLoader`` arguments (``collate_fn``, ``prefetch_factor``, ...).

    Returns:
        A ``torchdata.stateful_dataloader.StatefulDataLoader``.
    """
    torch = require("torch", "torch", "stateful_loader")
    sdl = require("torchdata.stateful_dataloader", "torch", "stateful_loader")
    bad = sorted({"sampler", "batch_sampler", "generator", "shuffle"} & set(kwargs))
    if bad:
        raise ConfigError(f"stateful_loader got {bad}, which it sets itself",
                          fix="pass seed/shuffle instead, or build a StatefulDataLoader yourself")
    iterable = isinstance(dataset, torch.utils.data.IterableDataset)
    sampler = None
    if not iterable:
        if shuffle:
            from torchdata.stateful_dataloader.sampler import RandomSampler

            sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
        else:
            sampler = torch.utils.data.SequentialSampler(dataset)
    return sdl.StatefulDataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last,
                                  num_workers=num_workers, generator=torch.Generator().manual_seed(seed + 1),
                                  **kwargs)
