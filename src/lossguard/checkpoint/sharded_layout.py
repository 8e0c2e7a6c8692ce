"""What every part of a sharded (DCP) checkpoint agrees on: its format number, where each rank's own state goes.

Shared by the save side (:mod:`.sharded_publish`), the load side (:mod:`.sharded_load`), the store
(:mod:`.sharded`) and :class:`ShardedTrainState`.
"""
from __future__ import annotations

from typing import Any

SHARDED_FORMAT = 2
"""Manifest (and state) format of a sharded checkpoint."""


def rank_file(rank: int) -> str:
    """The name of rank ``rank``'s own file in a checkpoint of an older lossguard
    (RNG, data position, scheduler, extras); newer ones hold that state as a DCP item (:func:`rank_key`)."""
    return f"rank-{rank:05d}.pt"


def rank_key(rank: int) -> str:
    """The DCP state-dict key of rank ``rank``'s own state (``torch.save`` bytes, in that rank's shard file)."""
    return f"lossguard_rank_{rank:05d}"


def active_dist() -> Any:
    """``torch.distributed`` when a process group is initialised, else None (a single process)."""
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None
