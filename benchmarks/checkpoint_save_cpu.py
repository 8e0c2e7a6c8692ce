"""CPU time of a sharded checkpoint's sync save: plain ``dcp.save`` vs lossguard's
``ShardedCheckpointStore.save``, many interleaved repeats in the same processes (issue 23).

An FSDP2 MLP (4 square Linear layers, weights + 2 Adam moments: width 1024 = 48 MiB, 2048 =
192 MiB on disk, both ranks) is saved again and again, two ways in alternating order: plain
``get_state_dict`` + ``dcp.save`` into a fresh directory (the issue's baseline), and
``ShardedTrainState.save(store)`` (rank state, temp directory, CRC-32 and item marks while writing,
manifest, rename, fsyncs, housekeeping; ``keep_last`` large, so nothing is pruned). Every
checkpoint is deleted again by rank 0 between two barriers outside the timed span, so the disk
holds one at a time. Reported per way: the median CPU time (``time.process_time``: all threads,
the fsync threads included) of each rank, the median paired ratio of both ranks' CPU to plain's,
the same without the time spent in Python's garbage collector (a full collection lands on
whichever save trips it), the GC time per save, and the slowest rank's wall time.
``--profile PREFIX`` also writes each rank's cProfile of each way's saves (``PREFIX.plain.rank<N>``,
``PREFIX.store.rank<N>``; ``pstats`` format, ``time.thread_time`` timer: the calling thread's CPU). Run::

    PYTHONPATH=src:. .venv/bin/python benchmarks/checkpoint_save_cpu.py [--width 1024] [--repeat 40]
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path


def _worker(rank: int, world: int, width: int, repeat: int, root: str, profile: str | None) -> dict:
    import warnings

    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.device_mesh import init_device_mesh

    from lossguard.checkpoint import ShardedCheckpointStore, ShardedTrainState
    from sharded_bench import GcClock, sharded_mlp

    warnings.filterwarnings("ignore")
    mesh = init_device_mesh("cpu", (world,))
    model, opt = sharded_mlp(width, mesh)
    state = ShardedTrainState(model, opt, step=1)
    store = ShardedCheckpointStore(Path(root) / "store", keep_last=100_000)
    counter = [0]
    written: list[Path] = []

    def plain() -> None:
        counter[0] += 1
        msd, osd = get_state_dict(model, opt)
        path = Path(root) / f"plain-{counter[0]}"
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
        written.append(path)

    def ours() -> None:
        counter[0] += 1
        state.step = counter[0]
        written.append(state.save(store))

    ops = {"plain DCP": plain, "store": ours}

    def tidy() -> None:  # outside the timed span: one checkpoint on disk at a time
        dist.barrier()
        if rank == 0:
            for path in written:
                shutil.rmtree(path, ignore_errors=True)
        written.clear()
        dist.barrier()

    for fn in ops.values():  # warm: imports, caches, allocator
        for _ in range(2):
            fn()
            tidy()
    profs = {}
    if profile:
        import cProfile

        profs = {name: cProfile.Profile(time.thread_time) for name in ops}
    cpu: dict[str, list[float]] = {k: [] for k in ops}
    gc_time: dict[str, list[float]] = {k: [] for k in ops}
    wall: dict[str, list[float]] = {k: [] for k in ops}
    clock = GcClock()
    clock.start()
    names = list(ops)
    for r in range(repeat):
        for name in (names if r % 2 == 0 else names[::-1]):  # ABBA
            dist.barrier()
            prof = profs.get(name)
            if prof is not None:
                prof.enable()
            g0, c0, t0 = clock.seconds, time.process_time(), time.perf_counter()
            ops[name]()
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            gc_time[name].append(clock.seconds - g0)
            if prof is not None:
                prof.disable()
            tidy()
    for name, prof in profs.items():
        prof.dump_stats(f"{profile}.{name.split()[0]}.rank{rank}")
    clock.stop()
    return {"cpu": cpu, "wall": wall, "gc": gc_time}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--profile", default=None, help="write each rank's cProfile of each way to PREFIX.<way>.rankN")
    args = ap.parse_args()
    from lossguard.testing.distributed import run_distributed
    from sharded_bench import print_cpu_table

    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as root:
        res = run_distributed(_worker, world_size=args.world, timeout=1800,
                              args=(args.width, args.repeat, root, args.profile))
    print(f"width {args.width}: {args.world} ranks, {args.repeat} repeats, load average {load:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end")
    print_cpu_table(res, args.repeat, "save")

if __name__ == "__main__":
    main()
