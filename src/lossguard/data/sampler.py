"""ResumableSampler: deterministic index-based batches with an exact, O(1)-skippable position.

The order of epoch ``e`` is a pure function of ``(seed, e)``, and the whole state is one integer:
the global index of the next batch to deliver (``position``; epoch = position // batches_per_epoch).
So resuming is exact for any number of DataLoader workers, skipping ``n`` batches is ``position +=
n``, and the sample ids of any batch (provenance) are recomputed from its position alone.

Two ways to feed a loop:

- ``DataLoader(ds, batch_sampler=sampler, num_workers=0)`` or iterating the sampler directly: the
  sampler commits a batch when it hands its indices out, which is when the loop gets it.
- With workers, the DataLoader asks for indices ahead of use (prefetch), so committing there would
  count batches the loop never trained on. Use :class:`lossguard.data.loader.ResumableLoader`, which
  commits a batch when it is delivered to the loop and restarts its workers after a skip or a load.

Randomness inside ``dataset[i]`` (augmentation) must come from ``(seed, i)``, not from a worker's
global RNG: which worker loads which batch changes when a run resumes mid-epoch.
"""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from ..errors import CheckpointError, ConfigError, raise_all

SAMPLER_FORMAT = 1
# Part of the order's definition: changing it changes every run's data order.
_EPOCH_SALT = 0x6C6F7373  # "loss"


class ResumableSampler:
    """Batches of sample indices in a deterministic, resumable, skippable order.

    Args:
        dataset_len: number of samples (indices are ``0 .. dataset_len-1``).
        batch_size: samples per batch.
        seed: the order's seed; epoch ``e`` is shuffled with ``(seed, e)``.
        shuffle: shuffle each epoch; False gives ``0, 1, 2, ...`` every epoch.
        drop_last: drop the last incomplete batch of each epoch (keeps every batch the same size).
        num_replicas: data-parallel ranks sharing the order (torch.distributed world size). A global
            batch is ``batch_size * num_replicas`` consecutive samples of the order; each rank takes
            its slice, so the position (and the state every rank saves) is the same on all ranks.
        rank: this process's rank, ``0 <= rank < num_replicas``.
        skiplist: a :class:`lossguard.data.skiplist.SkipList`; its samples are left out of the
            batches they fall in (a batch is then that much smaller), so positions, and with them
            resumes and skip ranges, mean the same with or without it. Settable later
            (``sampler.skiplist = ...``; the guard attaches its own when none is set).
    """

    def __init__(self, dataset_len: int, *, batch_size: int, seed: int, shuffle: bool = True,
                 drop_last: bool = True, num_replicas: int = 1, rank: int = 0, skiplist=None) -> None:
        problems = []
        if not isinstance(dataset_len, (int, np.integer)) or dataset_len < 1:
            problems.append(f"dataset_len must be an int >= 1, got {dataset_len!r}")
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            problems.append(f"batch_size must be an int >= 1, got {batch_size!r}")
        elif drop_last and isinstance(dataset_len, (int, np.integer)) and 0 < dataset_len < batch_size:
            problems.append(f"batch_size {batch_size} > dataset_len {dataset_len} with drop_last=True "
                            "leaves no batch")
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            problems.append(f"seed must be an int >= 0, got {seed!r}")
        if not isinstance(num_replicas, (int, np.integer)) or num_replicas < 1:
            problems.append(f"num_replicas must be an int >= 1, got {num_replicas!r}")
        elif not isinstance(rank, (int, np.integer)) or not 0 <= rank < num_replicas:
            problems.append(f"rank must be an int in [0, num_replicas={num_replicas}), got {rank!r}")
        elif num_replicas > 1 and not drop_last:
            problems.append("drop_last must be True with num_replicas > 1 (every rank needs a full batch)")
        elif isinstance(dataset_len, (int, np.integer)) and isinstance(batch_size, (int, np.integer)) \
                and 0 < dataset_len < batch_size * num_replicas:
            problems.append(f"dataset_len {dataset_len} < batch_size {batch_size} x num_replicas {num_replicas}")
        raise_all(problems, error=ConfigError, fix="fix the ResumableSampler arguments")
        self.dataset_len, self.batch_size, self.seed = int(dataset_len), int(batch_size), int(seed)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self.num_replicas, self.rank = int(num_replicas), int(rank)
        full, rest = divmod(self.dataset_len, self.batch_size * self.num_replicas)
        #: Batches in one epoch.
        self.batches_per_epoch = full if drop_last or rest == 0 else full + 1
        self._position = 0
        self._last: list[int] = []
        self._skipped: list[tuple[int, int]] = []
        self._generation = 0  # bumped by skip/seek/load: live iterators stop, loaders restart
        self._cache: tuple[int, np.ndarray] | None = None
        self._deferred = False  # set by ResumableLoader: it commits on delivery instead
        self.skiplist = skiplist

    # ------------------------------------------------------------------ order and provenance
    def order(self, epoch: int) -> np.ndarray:
        """The sample order of ``epoch`` (int64, length ``dataset_len``); cached for one epoch."""
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1]
        if self.shuffle:
            rng = np.random.Generator(np.random.PCG64([self.seed, int(epoch), _EPOCH_SALT]))
            perm = rng.permutation(self.dataset_len).astype(np.int64)
        else:
            perm = np.arange(self.dataset_len, dtype=np.int64)
        self._cache = (int(epoch), perm)
        return perm

    def batch_ids(self, position: int) -> list[int]:
        """Sample ids of this rank's batch at global batch index ``position`` (skip list honoured)."""
        return self.rank_batch_ids(position, self.rank)

    def rank_batch_ids(self, position: int, rank: int) -> list[int]:
        """Sample ids rank ``rank`` gets at ``position``: its slice of the global batch, less the
        skip list's samples (each rank's slice is fixed first, so a listed sample never moves
        another sample to a different rank)."""
        ids = self.global_batch_ids(position)[rank * self.batch_size:(rank + 1) * self.batch_size]
        return ids if not self.skiplist else self.skiplist.filter(ids)

    def global_batch_ids(self, position: int) -> list[int]:
        """Sample ids of every rank's batch at ``position``, rank 0's first (before the skip list;
        :func:`lossguard.data.sample_ids.step_samples` gives what each rank really got)."""
        epoch, b = divmod(int(position), self.batches_per_epoch)
        width = self.batch_size * self.num_replicas
        return self.order(epoch)[b * width:(b + 1) * width].tolist()

    def last_batch_ids(self) -> list[int]:
        """Sample ids of the batch most recently delivered (empty before the first)."""
        return list(self._last)

    # ------------------------------------------------------------------ position
    @property
    def position(self) -> int:
        """Global index of the next batch to deliver (batches delivered + skipped so far)."""
        return self._position

    @property
    def epoch(self) -> int:
        """Epoch of the next batch."""
        return self._position // self.batches_per_epoch

    @property
    def skipped(self) -> list[tuple[int, int]]:
        """Skipped ranges of global batch indices, as ``(start, end)`` half-open pairs."""
        return list(self._skipped)

    def skip_batches(self, n: int) -> None:
        """Skip the next ``n`` batches without reading them (O(1))."""
        if not isinstance(n, (int, np.integer)) or n < 0:
            raise ConfigError(f"skip_batches needs an int >= 0, got {n!r}", fix="pass a batch count")
        if n:
            self._skipped.append((self._position, self._position + int(n)))
            self.seek(self._position + int(n))

    def seek(self, position: int) -> None:
        """Make ``position`` the next batch (a rollback restores it through load_state_dict)."""
        if not isinstance(position, (int, np.integer)) or position < 0:
            raise ConfigError(f"seek needs a batch index >= 0, got {position!r}", fix="pass a global batch index")
        self._position = int(position)
        self._generation += 1

    @property
    def _stream_version(self) -> tuple[int, int]:
        """Changes when delivered batches may differ from prefetched ones (a seek, a skip-list edit)."""
        return self._generation, (self.skiplist.version if self.skiplist is not None else 0)

    def _commit(self, position: int, ids: list[int]) -> None:
        self._position, self._last = position, ids

    def __len__(self) -> int:
        return self.batches_per_epoch

    def __iter__(self) -> Iterator[list[int]]:
        """Batches from :attr:`position` to the end of its epoch (a DataLoader epoch).

        Stops early when the position is changed from outside (skip, seek, load_state_dict).
        """
        generation, p = self._generation, self._position
        end = (p // self.batches_per_epoch + 1) * self.batches_per_epoch
        while p < end and generation == self._generation:
            ids = self.batch_ids(p)
            p += 1
            if not self._deferred:
                self._commit(p, ids)
            yield ids

    def next_batch(self) -> list[int]:
        """Deliver and commit the next batch's ids (for loops that index their data directly)."""
        ids = self.batch_ids(self._position)
        self._commit(self._position + 1, ids)
        return ids

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Position (and the config it is only valid for), JSON- and weights_only-safe."""
        return {"format": SAMPLER_FORMAT, "dataset_len": self.dataset_len, "batch_size": self.batch_size,
                "seed": self.seed, "shuffle": self.shuffle, "drop_last": self.drop_last,
                "num_replicas": self.num_replicas, "rank": self.rank,
                "position": self._position, "epoch": self.epoch,
                "samples_consumed_in_epoch": (self._position % self.batches_per_epoch) * self.batch_size
                * self.num_replicas,
                "last_batch_ids": list(self._last), "skipped": [list(r) for r in self._skipped]}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Resume at the saved position; the order's config must match the saved one."""
        if not isinstance(sd, dict) or sd.get("format") != SAMPLER_FORMAT:
            raise CheckpointError("not a ResumableSampler state", fix="pass ResumableSampler.state_dict() output")
        wrong = [f"{k}: saved {sd.get(k)!r}, this sampler has {getattr(self, k)!r}"
                 for k in ("dataset_len", "batch_size", "seed", "shuffle", "drop_last", "num_replicas")
                 if sd.get(k, 1 if k == "num_replicas" else None) != getattr(self, k)]
        raise_all(wrong, error=CheckpointError,
                  fix="build the sampler with the saved arguments; a different order cannot resume exactly")
        self.seek(int(sd["position"]))
        self._last = list(sd.get("last_batch_ids", [])) if sd.get("rank", 0) == self.rank else []
        self._skipped = [tuple(r) for r in sd.get("skipped", [])]
