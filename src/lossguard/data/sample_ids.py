"""Sample ids: which dataset samples a step drew, recomputed from the data position alone.

A :class:`ResumableSampler`'s order is a pure function of ``(seed, epoch)``, so the samples of any
global batch index -- on every rank, for any world size -- follow from the position without any
record of what was read. :func:`step_samples` gives them per rank and for the whole global batch.

Ids are *flat* indices into the dataset the sampler draws from. For a mix of named datasets
(``torch.utils.data.ConcatDataset`` order), :class:`DatasetMix` turns a flat index into a portable
:class:`SampleKey` (dataset name + index inside it), which stays valid when the mix is rebuilt with
datasets added, reordered or resized -- what a skip list must survive.

No torch import: the log-analysis path reads these records too.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import ConfigError, raise_all


@dataclass(frozen=True, order=True)
class SampleKey:
    """An absolute, portable sample id: the dataset's name (None for a single dataset) and the
    sample's index inside that dataset."""

    dataset: str | None
    """Name of the dataset in a mix; None when the run reads one dataset."""
    index: int
    """Index of the sample inside its dataset (``dataset[index]``)."""

    def to_json(self) -> Any:
        """``index`` for a single dataset, ``{"dataset": name, "index": i}`` in a mix."""
        return self.index if self.dataset is None else {"dataset": self.dataset, "index": self.index}

    @classmethod
    def from_json(cls, v: Any) -> "SampleKey":
        """The inverse of :meth:`to_json`; also reads ``"name:index"`` strings (the CLI's form).

        Raises:
            ConfigError: not a sample id.
        """
        if isinstance(v, bool):
            raise ConfigError(f"not a sample id: {v!r}", fix="use an index >= 0 or {'dataset': name, 'index': i}")
        if isinstance(v, int) and v >= 0:
            return cls(None, v)
        if isinstance(v, dict) and isinstance(v.get("index"), int) and v["index"] >= 0 \
                and (v.get("dataset") is None or isinstance(v.get("dataset"), str)):
            return cls(v.get("dataset"), int(v["index"]))
        if isinstance(v, str):
            name, _, idx = v.rpartition(":")
            if idx.isdigit():
                return cls(name or None, int(idx))
        raise ConfigError(f"not a sample id: {v!r}",
                          fix="use an index >= 0, 'name:index', or {'dataset': name, 'index': i}")

    def __str__(self) -> str:
        return str(self.index) if self.dataset is None else f"{self.dataset}:{self.index}"


class DatasetMix:
    """Flat indices of a concatenation of named datasets <-> :class:`SampleKey`.

    Args:
        sizes: ``{name: len(dataset)}`` in concatenation order (the order ``ConcatDataset`` got).
    """

    def __init__(self, sizes: Mapping[str, int]) -> None:
        problems = [f"dataset {n!r}: size must be an int >= 1, got {s!r}" for n, s in sizes.items()
                    if not isinstance(s, int) or isinstance(s, bool) or s < 1]
        if not sizes:
            problems.append("a mix needs at least one dataset")
        raise_all(problems, error=ConfigError, fix="pass {name: len(dataset)} for every dataset of the mix")
        self.names = list(sizes)
        self.sizes = [int(sizes[n]) for n in self.names]
        self._starts = [0]
        for s in self.sizes:
            self._starts.append(self._starts[-1] + s)

    def __len__(self) -> int:
        return self._starts[-1]

    def key(self, flat: int) -> SampleKey:
        """The dataset and inner index of flat index ``flat``."""
        if not 0 <= flat < len(self):
            raise ConfigError(f"flat index {flat} outside the mix of {len(self)} samples", fix="check the index")
        k = bisect.bisect_right(self._starts, flat) - 1
        return SampleKey(self.names[k], flat - self._starts[k])

    def flat(self, key: SampleKey) -> int | None:
        """The flat index of ``key`` in this mix (None: its dataset is not in the mix or too short)."""
        if key.dataset not in self.names:
            return None
        k = self.names.index(key.dataset)
        return self._starts[k] + key.index if key.index < self.sizes[k] else None


def key_of(flat: int, mix: DatasetMix | None) -> SampleKey:
    """The portable key of a flat sample index (identity without a mix)."""
    return SampleKey(None, int(flat)) if mix is None else mix.key(int(flat))


@dataclass(frozen=True)
class StepSamples:
    """The samples one step drew.

    Attributes:
        batch_index: the global batch index (the sampler position the batch was drawn at).
        per_rank: ``per_rank[r]`` is rank ``r``'s sample ids, in batch-row order (after the skip list).
    """

    batch_index: int
    per_rank: tuple[tuple[int, ...], ...]

    @property
    def global_ids(self) -> list[int]:
        """Every rank's ids, rank 0's first."""
        return [i for ids in self.per_rank for i in ids]

    def rank_of(self, sample: int) -> int | None:
        """Which rank trained on ``sample`` (None: not in this step)."""
        return next((r for r, ids in enumerate(self.per_rank) if sample in ids), None)


def step_samples(sampler, batch_index: int) -> StepSamples:
    """The sample ids of global batch ``batch_index``, per rank, for any world size.

    Args:
        sampler: a :class:`lossguard.data.sampler.ResumableSampler` (its skip list is honoured:
            the ids are those the ranks really got).
        batch_index: global batch index (``guard.batch_index``; ``sampler.position - 1`` for the
            batch just delivered).
    """
    return StepSamples(int(batch_index), tuple(tuple(sampler.rank_batch_ids(batch_index, r))
                                               for r in range(sampler.num_replicas)))
