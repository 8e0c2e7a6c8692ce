"""What exact resume costs: atomic checkpoint save/load and resuming deep into an epoch.

1. Save: ``CheckpointStore.save`` (temp dir, CRC-32 while writing, fsync file + dirs, rename)
   against plain ``torch.save(path)`` and ``torch.save`` + ``fsync``; load: ``store.load`` (CRC-32
   verified, weights_only) against plain ``torch.load``. State = a model's weights plus AdamW's two
   moments (3 x the parameter bytes), like a real optimizer checkpoint.
2. Resume at batch k of an epoch: ``ResumableSampler.load_state_dict`` (O(1)) against torchdata's
   ``StatefulDataLoader.load_state_dict`` + first batch, and against re-iterating a plain DataLoader
   and discarding k batches (what a loop without data state has to do).

Run: ``.venv/bin/python benchmarks/resume_costs.py [--mb 256] [--repeat 3]``. Prints medians and ratios.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch

from lossguard.checkpoint.store import CheckpointStore
from lossguard.data.sampler import ResumableSampler


def _median(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_checkpoint(mb: int, repeat: int) -> None:
    n = mb * 2**20 // 4 // 3  # float32 parameters such that weights + 2 moments = mb MiB
    state = {"model": {"w": torch.randn(n)}, "optimizer": {"exp_avg": torch.randn(n), "exp_avg_sq": torch.rand(n)}}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        d = Path(d)
        store = CheckpointStore(d / "store", keep_last=1)
        step = iter(range(10**6))

        def plain():
            torch.save(state, d / "plain.pt")

        def plain_fsync():
            with open(d / "fsync.pt", "wb") as fh:
                torch.save(state, fh)
                fh.flush()
                os.fsync(fh.fileno())

        rows = [("torch.save", _median(plain, repeat)), ("torch.save + fsync", _median(plain_fsync, repeat)),
                ("CheckpointStore.save", _median(lambda: store.save(next(step), state), repeat))]
        newest = store.steps()[-1]
        rows += [("torch.load", _median(lambda: torch.load(d / "plain.pt", weights_only=True), repeat)),
                 ("CheckpointStore.load (CRC-32 verified)", _median(lambda: store.load(newest), repeat))]
    print(f"\ncheckpoint of {mb} MiB (weights + AdamW moments), median of {repeat}, page cache warm")
    base = {"save": rows[0][1], "load": rows[3][1]}
    for name, t in rows:
        ref = base["load" if "load" in name else "save"]
        print(f"  {name:42s} {t * 1e3:9.1f} ms   {mb / t:7.0f} MiB/s   x{t / ref:5.2f}")


class _Images(torch.utils.data.Dataset):
    """A map-style dataset whose items cost something to produce (3x32x32 float from an index)."""

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(int(i))
        return torch.rand(3, 32, 32, generator=g), int(i)


def bench_data(k: int, repeat: int) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    warnings.filterwarnings("ignore")
    ds, bs = _Images(), 64
    s = ResumableSampler(len(ds), batch_size=bs, seed=0)
    s.skip_batches(k)
    saved = s.state_dict()

    def ours():
        fresh = ResumableSampler(len(ds), batch_size=bs, seed=0)
        fresh.load_state_dict(saved)
        fresh.next_batch()

    sdl = StatefulDataLoader(ds, batch_size=bs, shuffle=True, generator=torch.Generator().manual_seed(0))
    it = iter(sdl)
    for _ in range(3):
        next(it)
    sdl_state = sdl.state_dict()
    # pretend k batches were consumed: the sampler state counts yielded samples
    sdl_state["_sampler_iter_state"]["samples_yielded"] = k * bs
    sdl_state["_sampler_iter_state"]["sampler_iter_state"]["yielded"] = k * bs
    sdl_state["_sampler_iter_yielded"] = sdl_state["_num_yielded"] = k

    def torchdata():
        fresh = StatefulDataLoader(ds, batch_size=bs, shuffle=True, generator=torch.Generator().manual_seed(0))
        fresh.load_state_dict(sdl_state)
        next(iter(fresh))

    def replay():
        dl = torch.utils.data.DataLoader(ds, batch_size=bs, shuffle=True, generator=torch.Generator().manual_seed(0))
        it = iter(dl)
        for _ in range(k + 1):
            next(it)

    t_ours = _median(ours, repeat)
    t_td = _median(torchdata, repeat)
    t_replay = _median(replay, 1)
    print(f"\nresume at batch {k} of an epoch (1M samples, batch {bs}), time to the first batch's indices/data")
    print(f"  {'ResumableSampler.load_state_dict (O(1))':42s} {t_ours * 1e3:9.2f} ms   x1")
    print(f"  {'StatefulDataLoader.load_state_dict':42s} {t_td * 1e3:9.2f} ms   x{t_td / t_ours:,.0f}")
    print(f"  {'DataLoader, discard k batches':42s} {t_replay * 1e3:9.2f} ms   x{t_replay / t_ours:,.0f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=256)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--k", type=int, default=2000, help="resume position in batches")
    a = p.parse_args()
    torch.set_num_threads(1)
    bench_checkpoint(a.mb, a.repeat)
    bench_data(a.k, a.repeat)


if __name__ == "__main__":
    main()
