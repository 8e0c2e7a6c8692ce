"""Sharded checkpoints on 2 FSDP2 ranks (CPU, gloo): lossguard's ShardedCheckpointStore against
plain DCP, measured in the same run, for three checkpoint sizes.

Per size (an MLP of 4 square Linear layers, each ``fully_shard``-ed, trained one AdamW step so the
optimizer state exists; checkpoint = weights + 2 Adam moments = ~3x the parameter bytes):

- save, sync: plain ``dcp.save(get_state_dict(...))`` into a fresh directory (the issue's baseline,
  no temp dir, no checksums) vs ``ShardedCheckpointStore.save`` (temp dir, CRC-32C per file and per
  storage item computed while writing, per-rank RNG/data file, manifest, rename by rank 0, pruning);
- save, async: time the training thread is blocked (the call) and time until the checkpoint is
  published, for plain ``dcp.async_save`` (own gloo group) and the store's ``async_save``;
- load: plain ``dcp.load`` + ``set_state_dict`` vs the store with CRC verification (each item's
  bytes hashed as DCP reads them, checkpoint/crc_ranges.py) and without;
- rollback: ``HostSnapshot.restore`` (host memory) vs loading the same step from disk;
- step statistics: :func:`reduce_step_stats` (one all-reduce of 3 float64) vs
  ``clip_grad_norm_(...).full_tensor()`` plus an all-reduce of the loss, mean of 20 calls;
- peak memory: RSS growth over the value before the operation, sampled every 1 ms by a thread
  (the largest of the two ranks).

Each pair (plain save / store save, plain load / store load) runs in alternating order (ABBA).
Times are medians over ``--repeat`` runs, the larger of the two ranks (a collective operation ends
when the slowest rank does). The paired lines also give the CPU time of both ranks (all their
threads) per operation: the work done, which the neighbours on a shared machine disturb far less
than the wall time. Run::

    .venv/bin/python benchmarks/checkpoint_dcp.py [--widths 256 1024 2048] [--repeat 3] [--sync-only] [--no-rss]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Peak:
    """Peak RSS growth during a block, sampled every millisecond (by a thread that competes for the
    GIL with the operation timed: ``sample=False`` leaves only the before/after reading)."""

    def __init__(self, sample: bool = True) -> None:
        self.sample = sample

    def __enter__(self):
        self.base = self.peak = _rss()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        if self.sample:
            self._t.start()
        return self

    def _run(self):
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc):
        self._stop.set()
        if self.sample:
            self._t.join()
        self.peak = max(self.peak, _rss())
        self.growth = self.peak - self.base


def _worker(rank: int, world: int, widths: list[int], repeat: int, root: str, sync_only: bool = False,
            rss: bool = True):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world,))
    plain_group = dist.new_group(backend="gloo")
    return {width: _width(width, mesh, plain_group, repeat, root, sync_only, rss) for width in widths}


def _width(width: int, mesh, plain_group, repeat: int, root: str, sync_only: bool, rss: bool) -> dict:
    """Every measurement at one model width, on this rank."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from sharded_bench import sharded_mlp

    from lossguard.checkpoint import HostSnapshot, ShardedCheckpointStore, ShardedTrainState

    model, opt = sharded_mlp(width, mesh)
    params = sum(p.numel() for p in model.parameters())
    state = ShardedTrainState(model, opt, step=1)
    base = Path(root) / f"w{width}"
    # keep_last large: the plain saves are never deleted either, so the pair compares the write
    # path alone. A store that prunes (keep_last=1) is timed on its own row: on this VM (ext4
    # mounted with `discard`) deleting the previous checkpoint slows the next write (issue 23).
    store = ShardedCheckpointStore(base / "store", keep_last=10_000, async_saves=True)
    pruning = ShardedCheckpointStore(base / "pruning", keep_last=1)
    snap = HostSnapshot(state, every=1)
    rows: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    mem: dict[str, int] = {}

    def timed(name, fn):
        dist.barrier()
        with _Peak(rss) as peak:
            c0, t0 = time.process_time(), time.perf_counter()
            out = fn()
            dt = time.perf_counter() - t0
            cpu.setdefault(name, []).append(time.process_time() - c0)
        rows.setdefault(name, []).append(dt)
        mem[name] = max(mem.get(name, 0), peak.growth)
        return out

    def one(k: int) -> None:
        state.step = 1000 + 2 * k  # increasing: each save prunes the one before (keep_last=1)

        def plain_save():
            msd, osd = get_state_dict(model, opt)
            dcp.save({"model": msd, "optim": osd}, checkpoint_id=base / f"plain-{k}")

        # ABBA: which of a pair goes first alternates with the repeat (the second pays for the
        # first's writeback and page-cache churn on a shared disk).
        def pair(*ops):
            for name, fn in (ops if k % 2 == 0 else ops[::-1]):
                timed(name, fn)

        pair(("save plain DCP", plain_save), ("save store (sync)", lambda: state.save(store)))
        timed("save store (sync), keep_last=1", lambda: state.save(pruning))
        state.step = 1001 + 2 * k
        if sync_only:
            state.save(store)
        else:
            pending: dict[str, Any] = {}

            def plain_async_call():
                msd, osd = get_state_dict(model, opt)
                pending["f"] = dcp.async_save({"model": msd, "optim": osd}, checkpoint_id=base / f"plaina-{k}",
                                              process_group=plain_group)

            t0 = time.perf_counter()
            timed("async plain DCP: blocking", plain_async_call)
            pending["f"].result()
            rows.setdefault("async plain DCP: done", []).append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            p = timed("async store: blocking", lambda: state.async_save(store))
            p.wait()
            rows.setdefault("async store: published", []).append(time.perf_counter() - t0)

        def plain_load():
            msd, osd = get_state_dict(model, opt)
            sd: dict[str, Any] = {"model": msd, "optim": osd}
            dcp.load(sd, checkpoint_id=base / f"plain-{k}")
            set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])

        pair(("load plain DCP", plain_load), ("load store, CRC verified", lambda: state.restore(store, 1001 + 2 * k)))
        timed("load store, sizes only", lambda: state.restore(store, 1001 + 2 * k, verify=False))
        if not sync_only:
            timed("snapshot take", snap.take)
            timed("rollback from snapshot", snap.restore)

    for k in range(repeat):
        one(k)
    ckpt_bytes = sum(f.stat().st_size for f in store.path_of(store.agreed_steps()[-1]).iterdir())
    if sync_only:
        dist.barrier()
        return {"params": params, "bytes": ckpt_bytes, "snapshot_bytes": 0, "raw": rows, "cpu": cpu,
                "times": {k: statistics.median(v) for k, v in rows.items()}, "mem": mem}
    # Step statistics: lossguard's one packed all-reduce vs torch's clip_grad_norm_ (DTensor
    # norm, full_tensor) plus an all-reduce of the loss, what a loop would otherwise do.
    from lossguard.distributed.fsdp import reduce_step_stats

    model(torch.randn(8, width)).sum().backward()
    loss = torch.tensor(1.0)

    def torch_way():
        n = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        n = n.full_tensor() if hasattr(n, "full_tensor") else n
        total = loss.clone()
        dist.all_reduce(total)
        return bool(torch.isfinite(n) & torch.isfinite(total))

    for name, fn in (("step stats: torch clip_grad_norm_ + loss all-reduce", torch_way),
                     ("step stats: reduce_step_stats", lambda: bool(reduce_step_stats(loss, model.parameters())
                                                                    .any_nonfinite))):
        for _ in range(3):
            fn()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(20):
            fn()
        rows[name] = [(time.perf_counter() - t0) / 20]
    opt.zero_grad(set_to_none=True)
    dist.barrier()
    return {"params": params, "bytes": ckpt_bytes, "snapshot_bytes": snap.nbytes, "raw": rows, "cpu": cpu,
            "times": {k: statistics.median(v) for k, v in rows.items()}, "mem": mem}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", type=int, nargs="+", default=[256, 1024, 2048])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sync-only", action="store_true", help="sync save and load only (no async, snapshot, stats)")
    ap.add_argument("--no-rss", action="store_true", help="no RSS sampling thread during the timed operations")
    args = ap.parse_args()
    from lossguard.testing.distributed import run_distributed

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as root:
        r0, r1 = run_distributed(_worker, world_size=2, timeout=1800,
                                 args=(args.widths, args.repeat, root, args.sync_only, not args.no_rss))
    for width in args.widths:
        a, b = r0[width], r1[width]
        print(f"\n### width {width}: {a['params'] / 1e6:.2f} M params, checkpoint {a['bytes'] / 2**20:.1f} MiB "
              f"on disk, host snapshot {(a['snapshot_bytes'] + b['snapshot_bytes']) / 2**20:.1f} MiB (both ranks)")
        print("| operation | time (ms) | vs plain DCP | peak RSS growth (MiB) |")
        print("|---|---:|---:|---:|")
        ref = {"save": "save plain DCP", "load": "load plain DCP", "asyn": "async plain DCP: blocking",
               "roll": "load plain DCP", "snap": "save plain DCP",
               "step": "step stats: torch clip_grad_norm_ + loss all-reduce"}
        for name in a["times"]:
            t = max(a["times"][name], b["times"][name])
            base = ref.get(name[:4], "")
            if name.startswith("async") and name.endswith(("done", "published")):
                base = "async plain DCP: done"
            tb = max(a["times"][base], b["times"][base]) if base else None
            ratio = f"{t / tb:.2f}x" if tb and base != name else ""
            m = max(a["mem"].get(name, 0), b["mem"].get(name, 0)) / 2**20
            print(f"| {name} | {t * 1e3:.1f} | {ratio} | {m:.1f} |" if name in a["mem"] else
                  f"| {name} | {t * 1e3:.1f} | {ratio} | |")
        # Paired: each repeat's store time over the plain time measured next to it (slower rank).
        for ours, plain in (("save store (sync)", "save plain DCP"),
                            ("save store (sync), keep_last=1", "save plain DCP"),
                            ("load store, CRC verified", "load plain DCP"),
                            ("load store, sizes only", "load plain DCP")):
            per = [max(x, y) / max(u, v) for x, y, u, v in
                   zip(a["raw"][ours], b["raw"][ours], a["raw"][plain], b["raw"][plain], strict=True)]
            q = statistics.quantiles(per, n=4) if len(per) > 1 else [per[0]] * 3
            print(f"paired {ours} / {plain}: median {statistics.median(per):.2f}x, quartiles "
                  f"{q[0]:.2f}-{q[2]:.2f}x, {sum(r <= 1.1 for r in per)} of {len(per)} <= 1.1x")
            # CPU time of both ranks together (all threads): the work done, much less sensitive
            # than wall time to the neighbours on a shared machine.
            work = [(x + y) / (u + v) for x, y, u, v in
                    zip(a["cpu"][ours], b["cpu"][ours], a["cpu"][plain], b["cpu"][plain], strict=True)]
            ours_ms, plain_ms = (statistics.median(map(sum, zip(a["cpu"][n], b["cpu"][n], strict=True))) * 1e3
                                 for n in (ours, plain))
            print(f"paired CPU time {ours} / {plain}: median {statistics.median(work):.2f}x "
                  f"({ours_ms:.1f} / {plain_ms:.1f} ms, both ranks)")


if __name__ == "__main__":
    main()
