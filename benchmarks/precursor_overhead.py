"""Overhead of the precursor statistics (issue 20 goal: at most 2% of a training step on CPU).

One training step of the natural-instability benchmark's model (TinyGPT, 3 layers, width 64, 4
heads, batch 16 x 64 bytes, AdamW) is timed three ways, interleaved in blocks so that the load of a
shared machine falls on all of them alike:

* ``plain``: forward, backward, clip, ``optimizer.step()``;
* ``stats``: the same plus :class:`PrecursorMonitor` (attention logits -- recorded by the shipped
  attention while it attends --, output-logit max and log Z, update ratio, Adam's ratio) and the
  one host read of its packed tensor per step;
* ``stats_every_step``: as ``stats`` with the diagnostics (output logits, Adam's ratio) measured on
  every step instead of every 4th (``diagnostic_every=1``);
* ``stats_no_update``: without the update ratio (which keeps one copy of the parameters);
* ``stats_treat``: as ``stats`` plus what the guard does on the host with the values each step
  when the opt-in :class:`PrecursorTreatment` is on: :meth:`PrecursorMonitor.decode` (the log's
  metrics) and the treatment's decision (per-head maxima, the logit-growth window, the QK-clip
  test). Nothing here grows, so it never acts: this is the cost of watching, which is every step;
  an action (a clip, an LR cut, a rollback) is a rare event of its own.

Blocks run in a shuffled order each round. Time is the thread's CPU time (``time.thread_time``:
the time the other agents of a shared machine hold the core is not counted); wall time is printed
beside it. Prints the median step time of each and the overhead in percent (median of per-block
ratios against the ``plain`` block of the same round), and the CPU time spent inside the monitor's
own calls (``before_step``, ``after_step``, ``packed`` and its read; the output hook, which runs
inside the forward on diagnostic steps, is not in it): under heavy load the difference of two
step times is noisy by about 1% of a step, the time inside the calls is not.
That the path makes no host sync on a GPU is checked by ``precursor_gpu.py`` (CUDA's sync debug
mode "error" around the same steps); every statistic is a device tensor and the guard reads them in
its one deferred transfer per step.

    nice -n 10 python benchmarks/precursor_overhead.py --blocks 60 --steps 5 [--shape outside]
"""
from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time

import torch

from lossguard.guard.precursors import PrecursorMonitor
from lossguard.guard.treatment import PrecursorTreatment
from lossguard.demo.model import GPTConfig, TinyGPT


SHAPES = {"mild": {"n_layer": 3, "n_head": 4, "n_embd": 64, "batch": 16, "seq": 64},
          "outside": {"n_layer": 4, "n_head": 3, "n_embd": 96, "batch": 8, "seq": 128}}
"""``--shape``: the model and batch of ``natural_instability.py``'s ``mild`` (default) or ``outside`` preset."""


def make(kind: str, shape: dict):
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(n_layer=shape["n_layer"], n_head=shape["n_head"], n_embd=shape["n_embd"],
                              block_size=shape["seq"]))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    mon = None if kind == "plain" else PrecursorMonitor(
        model, opt, update_ratio=kind != "stats_no_update", diagnostic_every=1 if kind == "stats_every_step" else 4)
    # the treatment with its own step count (steps must rise across blocks, as in a run)
    treat = (PrecursorTreatment(), itertools.count()) if kind == "stats_treat" else None
    return model, opt, mon, treat


def block(model, opt, mon, treat, batches) -> tuple[float, float, float]:
    """(thread CPU seconds, wall seconds, CPU seconds inside the monitor's step calls) per step."""
    c0, t0, inside = time.thread_time(), time.perf_counter(), 0.0
    for x, y in batches:
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if mon is not None:
            c = time.thread_time()
            mon.before_step()
            inside += time.thread_time() - c
        opt.step()
        if mon is not None:
            c = time.thread_time()
            mon.after_step()
            values = mon.packed().tolist()  # the one host read per step
            if treat is not None:  # the guard's host side: the log's metrics, the treatment's decision
                mon.decode(values)
                if treat[0].respond(next(treat[1]), mon, values):
                    raise RuntimeError("the treatment acted on the overhead benchmark's model")
            inside += time.thread_time() - c
        opt.zero_grad(set_to_none=True)
    n = len(batches)
    return (time.thread_time() - c0) / n, (time.perf_counter() - t0) / n, inside / n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=60)
    ap.add_argument("--steps", type=int, default=5, help="steps per block")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="mild")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    shape = SHAPES[a.shape]
    batches = [(torch.randint(0, 256, (shape["batch"], shape["seq"]), generator=g),) * 2 for _ in range(a.steps)]
    kinds = ("plain", "stats", "stats_every_step", "stats_no_update", "stats_treat")
    runs = {k: make(k, shape) for k in kinds}
    for k in kinds:
        block(*runs[k], batches[:3])  # warm-up
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    wall: dict[str, list[float]] = {k: [] for k in kinds}
    inside: dict[str, list[float]] = {k: [] for k in kinds}
    order, rng = list(kinds), random.Random(0)
    for _ in range(a.blocks):
        rng.shuffle(order)
        for k in order:
            c, w, i = block(*runs[k], batches)
            cpu[k].append(c)
            wall[k].append(w)
            inside[k].append(i)
    print(f"plain: {statistics.median(cpu['plain']) * 1e3:.2f} ms/step CPU, "
          f"{statistics.median(wall['plain']) * 1e3:.2f} ms wall (median of {a.blocks} blocks of {a.steps} steps)")
    for k in kinds[1:]:
        r_cpu = statistics.median(t / p for t, p in zip(cpu[k], cpu["plain"], strict=True))
        r_wall = statistics.median(t / p for t, p in zip(wall[k], wall["plain"], strict=True))
        own = statistics.median(inside[k]) / statistics.median(cpu["plain"])
        print(f"{k}: {statistics.median(cpu[k]) * 1e3:.2f} ms/step CPU, overhead {100 * (r_cpu - 1):+.2f}% CPU, "
              f"{100 * (r_wall - 1):+.2f}% wall (median of per-block ratios); inside the monitor's step "
              f"calls {statistics.median(inside[k]) * 1e3:.3f} ms = {100 * own:.2f}% of a plain step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
