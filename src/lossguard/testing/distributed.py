"""A 2-rank (or n-rank) torch.distributed launcher for tests: real processes, gloo, CPU, timeouts.

``run_distributed(fn, world_size=2, args=(...))`` spawns ``world_size`` fresh Python processes
(``torch.multiprocessing`` with the ``spawn`` start method), each of which joins a gloo process
group on a free localhost port and calls ``fn(rank, world_size, *args)``. The return values come
back in rank order. Nothing can hang a test run: the process group has a collective timeout, the
parent waits at most ``timeout`` seconds, and ranks still alive then are killed and reported.

``fn`` must be importable by the child (a module-level function, e.g. in the test module).
"""
from __future__ import annotations

import os
import pickle
import queue as queue_mod
import socket
import time
import traceback
from datetime import timedelta
from typing import Any, Callable

from ..errors import LossguardError


class DistributedRunError(LossguardError):
    """A rank failed, or the ranks did not finish within the timeout."""


def free_port() -> int:
    """A TCP port on localhost that was free a moment ago (bind to 0, read it, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(fn, rank: int, world_size: int, port: int, backend: str, timeout: float, args: tuple, results) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    try:
        dist.init_process_group(backend, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=max(timeout, 1.0)))
        try:
            # Plain pickle (not the queue's ForkingPickler): tensors are copied, not shared through
            # file descriptors that die with this process.
            results.put((rank, "ok", pickle.dumps(fn(rank, world_size, *args))))
        finally:
            dist.destroy_process_group()
    except BaseException:  # report everything, including KeyboardInterrupt, to the parent
        results.put((rank, "error", traceback.format_exc()))


def run_distributed(fn: Callable[..., Any], *, world_size: int = 2, args: tuple = (), timeout: float = 120.0,
                    backend: str = "gloo") -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` real ranks; return the results by rank.

    Raises:
        DistributedRunError: a rank raised (its traceback is in the message), died without a
            result, or the ranks were not done within ``timeout`` seconds (they are killed).
    """
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(fn, r, world_size, port, backend, timeout, args, results),
                         daemon=True) for r in range(world_size)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    got: dict[int, Any] = {}
    errors: list[str] = []
    try:
        while len(got) + len(errors) < world_size:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                rank, status, value = results.get(timeout=min(left, 1.0))
            except queue_mod.Empty:
                if all(not p.is_alive() for p in procs) and results.empty():
                    break  # every rank exited; whoever did not report died hard
                continue
            if status == "ok":
                got[rank] = pickle.loads(value)
            else:
                errors.append(f"rank {rank}:\n{value}")
    finally:
        for p in procs:
            p.join(timeout=max(0.0, min(5.0, deadline - time.monotonic())))
        alive = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    if errors:
        raise DistributedRunError("a distributed rank failed:\n" + "\n".join(errors))
    missing = [r for r in range(world_size) if r not in got]
    if missing:
        why = f"still running after {timeout:g} s (killed)" if alive else "exited without a result"
        raise DistributedRunError(f"ranks {missing} {why}", fix="look for a collective that one rank skipped")
    return [got[r] for r in range(world_size)]
