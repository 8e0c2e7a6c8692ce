"""CPU time of a sharded checkpoint's load: plain ``dcp.load`` vs lossguard's CRC-verified load of
the same checkpoint directory, many interleaved repeats in the same processes (issue 23).

One ``ShardedCheckpointStore`` checkpoint of an FSDP2 MLP (4 square Linear layers, weights + 2 Adam
moments: width 1024 = 48 MiB, 2048 = 192 MiB) is loaded again and again, three ways in rotating
order: plain ``dcp.load`` + ``set_state_dict`` (the checkpoint is readable by plain DCP), the
store's ``restore`` with CRC verification, and without (sizes only). Reported: per way, the median
CPU time (``time.process_time``, all threads) of each rank and the median paired ratio to plain,
which a shared machine's neighbours disturb far less than the wall time, also without the time spent
in Python's garbage collector: a full collection (~5 ms here) comes every few loads and lands on
whichever load trips it, so it moves between the three ways when one allocates a little more or
less. ``--profile FILE`` also writes rank 0's cProfile of the verified loads (``pstats`` format). Run::

    PYTHONPATH=src:. .venv/bin/python benchmarks/checkpoint_load_cpu.py [--width 1024] [--repeat 40] [--world 2]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def _worker(rank: int, world: int, width: int, repeat: int, root: str, profile: str | None) -> dict:
    import warnings

    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh

    from lossguard.checkpoint import ShardedCheckpointStore, ShardedTrainState
    from sharded_bench import GcClock, sharded_mlp

    warnings.filterwarnings("ignore")
    mesh = init_device_mesh("cpu", (world,))
    model, opt = sharded_mlp(width, mesh)
    state = ShardedTrainState(model, opt, step=1)
    store = ShardedCheckpointStore(Path(root) / "store", keep_last=10)
    state.save(store)
    path = store.path_of(1)

    def plain() -> None:
        msd, osd = get_state_dict(model, opt)
        sd = {"model": msd, "optim": osd}
        dcp.load(sd, checkpoint_id=path)
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])

    ops = {"plain DCP": plain, "store, CRC verified": lambda: state.restore(store, 1),
           "store, sizes only": lambda: state.restore(store, 1, verify=False)}
    for fn in ops.values():  # warm: imports, caches, allocator
        fn()
        fn()
    prof = None
    if profile and rank == 0:
        import cProfile

        prof = cProfile.Profile()
    cpu: dict[str, list[float]] = {k: [] for k in ops}
    gc_time: dict[str, list[float]] = {k: [] for k in ops}
    clock = GcClock()
    clock.start()
    wall: dict[str, list[float]] = {k: [] for k in ops}
    names = list(ops)
    for r in range(repeat):
        for name in names[r % 3:] + names[:r % 3]:  # rotate which goes first
            dist.barrier()
            if prof is not None and name == "store, CRC verified":
                prof.enable()
            g0, c0, t0 = clock.seconds, time.process_time(), time.perf_counter()
            ops[name]()
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
            gc_time[name].append(clock.seconds - g0)
            if prof is not None:
                prof.disable()
    if prof is not None:
        prof.dump_stats(profile)
    dist.barrier()
    clock.stop()
    return {"cpu": cpu, "wall": wall, "gc": gc_time, "bytes": sum(f.stat().st_size for f in path.iterdir())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--profile", default=None, help="write rank 0's cProfile of the verified loads here")
    args = ap.parse_args()
    from lossguard.testing.distributed import run_distributed
    from sharded_bench import print_cpu_table

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as root:
        res = run_distributed(_worker, world_size=args.world, timeout=1800,
                              args=(args.width, args.repeat, root, args.profile))
    print(f"width {args.width}: checkpoint {res[0]['bytes'] / 2**20:.1f} MiB, {args.world} ranks, "
          f"{args.repeat} repeats, load average {os.getloadavg()[0]:.2f}")
    print_cpu_table(res, args.repeat, "load")

if __name__ == "__main__":
    main()
