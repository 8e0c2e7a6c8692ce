"""Overhead of the precursor statistics (issue 20 goal: at most 2% of a training step on CPU).

One training step of the natural-instability benchmark's model (TinyGPT, 3 layers, width 64, 4
heads, batch 16 x 64 bytes, AdamW) is timed three ways, interleaved in blocks so that the load of a
shared machine falls on all of them alike:

* ``plain``: forward, backward, clip, ``optimizer.step()``;
* ``stats``: the same plus :class:`PrecursorMonitor` (attention logits -- recorded by the shipped
  attention while it attends --, output-logit max and log Z, update ratio, Adam's ratio) and the
  one host read of its packed tensor per step;
* ``stats_no_update``: without the update ratio (which keeps one copy of the parameters).

Prints the median step time of each and the overhead in percent (median of per-block ratios).
What this cannot show without a GPU: that the path makes no host sync there. By design every
statistic is a device tensor and the guard reads them in its one deferred transfer per step.

    nice -n 10 python benchmarks/precursor_overhead.py --blocks 15 --steps 20
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from lossguard.guard.precursors import PrecursorMonitor
from lossguard.demo.model import GPTConfig, TinyGPT


def make(kind: str):
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(n_layer=3, n_head=4, n_embd=64, block_size=64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    mon = None if kind == "plain" else PrecursorMonitor(model, opt, update_ratio=kind == "stats")
    return model, opt, mon


def block(model, opt, mon, batches) -> float:
    t0 = time.perf_counter()
    for x, y in batches:
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if mon is not None:
            mon.before_step()
        opt.step()
        if mon is not None:
            mon.after_step()
            mon.packed().tolist()  # the one host read per step
        opt.zero_grad(set_to_none=True)
    return (time.perf_counter() - t0) / len(batches)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=15)
    ap.add_argument("--steps", type=int, default=20, help="steps per block")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, 256, (16, 64), generator=g),) * 2 for _ in range(a.steps)]
    kinds = ("plain", "stats", "stats_no_update")
    runs = {k: make(k) for k in kinds}
    for k in kinds:
        block(*runs[k], batches[:3])  # warm-up
    times = {k: [] for k in kinds}
    for _ in range(a.blocks):
        for k in kinds:
            times[k].append(block(*runs[k], batches))
    base = statistics.median(times["plain"])
    print(f"plain: {base * 1e3:.2f} ms/step (median of {a.blocks} blocks of {a.steps} steps)")
    for k in kinds[1:]:
        ratio = statistics.median(t / p for t, p in zip(times[k], times["plain"]))
        print(f"{k}: {statistics.median(times[k]) * 1e3:.2f} ms/step, overhead {100 * (ratio - 1):+.2f}% "
              f"(median of per-block ratios)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
