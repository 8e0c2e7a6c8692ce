"""Guard overhead: guarded vs unguarded training step on the tiny GPT, and per-call cost on a no-op model.

Configurations, interleaved round-robin (so load changes on the shared machine hit all alike) and
reported as the median step time over all rounds, both as CPU time of the (single) torch thread
(``time.thread_time``: what the step costs, little affected by other jobs on a shared machine) and
as wall time:

- ``plain``: backward; ``clip_grad_norm_``; ``AdamW.step``; scheduler; ``zero_grad`` -- the loop a
  user writes without lossguard (with the gradient clipping most LLM loops have).
- ``guard (CPU default)``: the same model and AdamW under ``StabilityGuard`` with its CPU defaults
  (host statistics = the analyser's ``OnlineOutlier``, host gate), the guard doing the clipping.
- ``guard (GPU design)``: :class:`SkipStepAdamW` with the device gate and ``DeviceOutlier``
  statistics (no sync on a GPU), measured here on the CPU.
- ``plain SkipStepAdamW``: SkipStepAdamW without the guard (separates the optimizer's own cost).

Checkpointing is off in every configuration (``checkpoint_every=None``): writing a checkpoint costs
the same with or without the guard and is measured by ``benchmarks/resume_costs.py``.

Run: ``.venv/bin/python benchmarks/guard_overhead.py [--steps 60 --rounds 5 --batch 32]``.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from lossguard.guard import GuardConfig, SkipStepAdamW, StabilityGuard
from lossguard.demo.model import GPTConfig, TinyGPT


def _data(cfg: GPTConfig, batch: int, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    seq = torch.randint(0, cfg.vocab_size, (n, batch, cfg.block_size + 1), generator=g)
    return [(s[:, :-1].contiguous(), s[:, 1:].contiguous()) for s in seq]


def _setup(kind: str, gcfg: GPTConfig):
    torch.manual_seed(0)
    model = TinyGPT(gcfg)
    gpu = kind in ("guard (GPU design)", "plain SkipStepAdamW")
    opt_cls = SkipStepAdamW if gpu else torch.optim.AdamW
    opt = opt_cls(model.parameters(), lr=3e-4, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    guard = None
    if kind.startswith("guard"):
        guard = StabilityGuard(model, opt, scheduler=sched, config=GuardConfig(
            checkpoint_every=None, max_grad_norm=1.0, replay=False, log_metrics=False,
            stats="device" if gpu else "auto"))
    return model, opt, sched, guard


def _time_steps(kind, state, batches) -> list[tuple[float, float]]:
    model, opt, sched, guard = state
    out = []
    for x, y in batches:
        c0, t0 = time.thread_time(), time.perf_counter()
        _, loss = model(x, y)
        loss.backward()
        if guard is not None:
            guard.step(loss)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
        out.append((time.thread_time() - c0, time.perf_counter() - t0))
    return out


def tiny_gpt(steps: int, rounds: int, batch: int) -> dict[str, tuple[float, float]]:
    gcfg = GPTConfig()
    kinds = ["plain", "guard (CPU default)", "guard (GPU design)", "plain SkipStepAdamW"]
    states = {k: _setup(k, gcfg) for k in kinds}
    data = _data(gcfg, batch, steps)
    for k in kinds:  # warm-up: allocator, first-call paths
        _time_steps(k, states[k], data[:5])
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for _ in range(rounds):
        for k in kinds:
            times[k] += _time_steps(k, states[k], data)
    return {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for k, v in times.items()}


def per_call(calls: int) -> dict[str, float]:
    """CPU time of one guard.step on a model with one scalar parameter (everything but the guard ~0)."""
    res = {}
    for kind in ("optimizer only", "guard (CPU default)", "guard (GPU design)"):
        torch.manual_seed(0)
        p = torch.nn.Parameter(torch.ones(1))
        model = torch.nn.ParameterList([p])
        gpu = kind == "guard (GPU design)"
        opt = (SkipStepAdamW if gpu else torch.optim.AdamW)([p], lr=1e-3)
        guard = None if kind == "optimizer only" else StabilityGuard(
            model, opt, config=GuardConfig(checkpoint_every=None, replay=False, log_metrics=False,
                                           stats="device" if gpu else "auto"))
        samples = []
        for i in range(calls):
            loss = (p * 1.0).sum() + 1.0 + 1e-3 * (i % 7)
            loss.backward()
            t0 = time.thread_time()
            if guard is None:
                opt.step()
                opt.zero_grad(set_to_none=True)
            else:
                guard.step(loss)
            samples.append(time.thread_time() - t0)
        res[kind] = statistics.median(samples[50:])
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60, help="steps per configuration per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--calls", type=int, default=2000, help="guard.step calls on the no-op model")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, threads 1, tiny GPT default config, batch {args.batch}, "
          f"{args.rounds} rounds x {args.steps} steps per configuration (interleaved)")
    med = tiny_gpt(args.steps, args.rounds, args.batch)
    cbase, wbase = med["plain"]
    print("\n| configuration | CPU ms/step | vs plain | wall ms/step | vs plain |")
    print("|---|---:|---:|---:|---:|")
    for k, (c, w) in med.items():
        print(f"| {k} | {c * 1e3:.2f} | {c / cbase:.3f}x | {w * 1e3:.2f} | {w / wbase:.3f}x |")
    pc = per_call(args.calls)
    print("\n| no-op model, per call | median CPU (us) |")
    print("|---|---:|")
    for k, v in pc.items():
        print(f"| {k} | {v * 1e6:.0f} |")


if __name__ == "__main__":
    main()
