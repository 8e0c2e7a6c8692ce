"""What every part of a sharded (DCP) checkpoint agrees on: its format number, its per-rank file, the group.

Shared by the save side (:mod:`.sharded_publish`), the load side (:mod:`.sharded_load`), the store
(:mod:`.sharded`) and :class:`ShardedTrainState`.
"""
from __future__ import annotations

from typing import Any

SHARDED_FORMAT = 2
"""Manifest (and state) format of a sharded checkpoint."""


def rank_file(rank: int) -> str:
    """The name of rank ``rank``'s own file in a checkpoint (RNG, data position, scheduler, extras)."""
    return f"rank-{rank:05d}.pt"


def active_dist() -> Any:
    """``torch.distributed`` when a process group is initialised, else None (a single process)."""
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None
