"""Guard overhead per training step under FSDP2 (2 CPU ranks, gloo), against the plain loop.

Model: the tiny GPT of ``evals.fsdp_train_loop`` (``fully_shard`` per block and at the
root), AdamW, batch 4 x 16 bytes per rank. Three loops, run in alternating blocks of ``--block``
steps so the machine's changing load hits all three alike:

- plain: ``loss.backward(); clip_grad_norm_(params, 1.0); opt.step(); sched.step(); zero_grad()``
  -- what an FSDP2 loop does without lossguard (torch's DTensor norm, one all-reduce);
- guard, host gate: ``StabilityGuard.step(loss)`` with ``max_grad_norm=1.0`` (one packed all-reduce
  of loss, grad norm and non-finite flag; the verdict read on the host once; no checkpoints);
- guard, device gate: the same with ``SkipStepAdamW`` (the skip selected on the device).

Reported: median step time of each loop (forward + backward + the loop's own work) and the
difference to plain. Run::

    .venv/bin/python benchmarks/guard_fsdp.py [--width 128] [--layers 2] [--steps 120] [--block 20]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root: evals/, the lab


def _worker(rank: int, world: int, width: int, layers: int, steps: int, block: int):
    import torch

    from lossguard.detect.outlier import OutlierConfig
    from lossguard.guard import GuardConfig, SkipStepAdamW, StabilityGuard
    from evals.fsdp_train_loop import build

    loops = {}
    for name in ("plain", "guard, host gate", "guard, device gate"):
        model, opt, sched, sampler, data = build(SimpleNamespace(layers=layers, width=width, steps=10**6), rank, world)
        if name.endswith("device gate"):
            opt = SkipStepAdamW(model.parameters(), lr=3e-3)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10**6)
        guard = None
        if name != "plain":
            cfg = GuardConfig(loss=OutlierConfig(min_points=20), grad_norm=OutlierConfig(min_points=20),
                              max_grad_norm=1.0, checkpoint_every=None, log_metrics=False)
            guard = StabilityGuard(model, opt, sampler=sampler, scheduler=sched, config=cfg)
        loops[name] = (model, opt, sched, sampler, data, guard)
    times = {name: [] for name in loops}
    n_params = sum(p.numel() for p in loops["plain"][0].parameters())
    for _ in range(steps // block):
        for name, (model, opt, sched, sampler, data, guard) in loops.items():
            for _ in range(block):
                torch.distributed.barrier()
                t0 = time.perf_counter()
                x, y = data.batch(next(iter(sampler)))
                _, loss = model(x, y)
                loss.backward()
                if guard is None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    opt.step()
                    sched.step()
                    opt.zero_grad(set_to_none=True)
                else:
                    guard.step(loss)
                times[name].append(time.perf_counter() - t0)
    return {"params": n_params, "median": {k: statistics.median(v[block:]) for k, v in times.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--block", type=int, default=20)
    args = ap.parse_args()
    from lossguard.testing.distributed import run_distributed

    r0, r1 = run_distributed(_worker, world_size=2, args=(args.width, args.layers, args.steps, args.block),
                             timeout=1800)
    print(f"tiny GPT, {r0['params'] / 1e3:.0f}k parameters, FSDP2 on 2 ranks; median step over "
          f"{args.steps - args.block} steps per loop (first block dropped)")
    print("| loop | step (ms) | overhead vs plain (ms) | overhead (%) |")
    print("|---|---:|---:|---:|")
    base = max(r0["median"]["plain"], r1["median"]["plain"])
    for name in r0["median"]:
        t = max(r0["median"][name], r1["median"][name])
        print(f"| {name} | {t * 1e3:.2f} | {(t - base) * 1e3:+.2f} | {(t / base - 1) * 100:+.1f} |")


if __name__ == "__main__":
    main()
