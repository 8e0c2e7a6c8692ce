"""Exit codes a launcher acts on, relaunch detection, and a restart-safe process-group start.

How recovery across a restart works: when the guard (or the heartbeat) cannot carry on in the
process, it leaves everything the next attempt needs on disk (checkpoints and the run ledger beside
them) and ends the process with one of the :class:`ExitCode` values. ``torchrun --max-restarts N``
(or any scheduler that restarts failed jobs) starts the same script again; the script resumes from
what is on disk. The codes are distinct from Python's own (1 for an uncaught exception, 2 for a
usage error) and from signals (128 + n), so a launcher or a human reading a log can tell them apart.

The trap this module's :func:`init_distributed` handles: ``torchrun`` keeps one TCPStore alive
across restarts (shared with the rendezvous, torch >= 2.4) and the workers of attempt ``k`` write
their gloo/NCCL bootstrap keys under the same names attempt ``k-1`` used. A restarted worker can
then read a dead peer's address and fail with ``Gloo connectFullMesh failed ... Connection
refused`` or hang (upstream: pytorch issue 135712; measured on this machine with torch 2.13.0: 5 of
6 trials failed with the defaults). Prefixing every key with the attempt number
(``TORCHELASTIC_RESTART_COUNT``) gives each attempt its own namespace; setting
``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` in the launcher's environment is the other fix.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from enum import IntEnum

from ..errors import ConfigError

__all__ = ["DistributedContext", "ExitCode", "init_distributed", "is_relaunch", "restart_count"]

#: Environment variable torchrun sets to the number of restarts so far (0 on the first attempt).
RESTART_ENV = "TORCHELASTIC_RESTART_COUNT"


class ExitCode(IntEnum):
    """Process exit codes lossguard uses to ask the launcher for something.

    ``torchrun`` restarts the whole job on any non-zero exit of any worker (up to
    ``--max-restarts``); a scheduler can read the code to decide.
    """

    ROLLBACK = 75
    """The guard decided on a rollback it cannot carry out in this process (HF Trainer, Lightning):
    the run ledger beside the checkpoints names the target and the batches to skip. Restart the
    same command. (75 is ``EX_TEMPFAIL`` in sysexits.h: "try again later".)"""
    HANG = 76
    """The heartbeat saw no progress on this rank for longer than its timeout (a rank stuck in a
    collective, a dead peer, a deadlock). Restart the same command; it resumes from the newest
    checkpoint."""
    HALT = 77
    """The guard stopped the run for good (its rollback budget is spent; the diagnosis is on disk).
    For a script that catches ``TrainingHalted`` and wants a scheduler to tell a halt from success:
    ``sys.exit(ExitCode.HALT)``. Do not restart on it. (``torchrun`` restarts on every non-zero
    exit, an uncaught ``TrainingHalted`` included: under ``torchrun`` catch it and exit with this
    code only if the launcher is told not to restart, or let the job end.)"""


def restart_count() -> int:
    """How many times the launcher restarted this job (``TORCHELASTIC_RESTART_COUNT``; 0 if unset)."""
    raw = os.environ.get(RESTART_ENV, "0").strip() or "0"
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{RESTART_ENV} must be an integer, got {raw!r}",
                          fix=f"unset {RESTART_ENV} or let torchrun set it") from None
    if value < 0:
        raise ConfigError(f"{RESTART_ENV} must be >= 0, got {value}", fix=f"unset {RESTART_ENV}")
    return value


def is_relaunch() -> bool:
    """True in a process the launcher started again after a failure (restart count > 0)."""
    return restart_count() > 0


@dataclass(frozen=True, kw_only=True)
class DistributedContext:
    """Where this process stands in the job.

    Attributes:
        rank: global rank; world_size: number of ranks; local_rank: rank on this host.
        restart: launcher restarts so far (0 on the first attempt).
    """

    rank: int
    world_size: int
    local_rank: int
    restart: int


def init_distributed(backend: str = "gloo", *, timeout_s: float = 300.0) -> DistributedContext:
    """Start the default process group from torchrun's environment, in a per-attempt key namespace.

    Equivalent to ``init_process_group(backend)`` with ``env://``, except that the store handed to
    the backend is ``PrefixStore(f"lossguard/attempt-{restart}", store)``: the bootstrap keys of a
    restarted attempt never meet those of the attempt before it (see the module docstring).
    Without ``WORLD_SIZE`` in the environment (a plain ``python train.py``) nothing is started and
    a single-process context is returned. The process group is destroyed at exit
    (:mod:`lossguard.distributed.clean_exit`) unless the script does it first.

    Args:
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (GPU).
        timeout_s: collective timeout in seconds; a rank waiting longer for its peers raises.
    """
    import torch.distributed as dist

    restart = restart_count()
    if "WORLD_SIZE" not in os.environ:
        return DistributedContext(rank=0, world_size=1, local_rank=0, restart=restart)
    if not dist.is_initialized():
        timeout = timedelta(seconds=timeout_s)
        store, rank, world = next(dist.rendezvous("env://", timeout=timeout))
        store = dist.PrefixStore(f"lossguard/attempt-{restart}", store)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
        from .clean_exit import destroy_at_exit
        destroy_at_exit()  # without destroy_process_group() some gloo jobs abort at exit (clean_exit.py)
    return DistributedContext(rank=dist.get_rank(), world_size=dist.get_world_size(),
                              local_rank=int(os.environ.get("LOCAL_RANK", dist.get_rank())), restart=restart)
