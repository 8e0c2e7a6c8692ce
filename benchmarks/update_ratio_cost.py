"""Cost and error of :class:`UpdateRatio`'s row sampling (issue 20: the precursor statistics' overhead).

Trains the natural-instability benchmark's model (``--shape`` as in ``precursor_overhead.py``) with
AdamW and measures the update ratio two ways ON THE SAME STEPS: exact (``sample_every=1``) and
sampled (``--every``, default 8). At ``--jump`` the LR is multiplied by ``--factor`` for one step
(the kind of jump the update-size test looks for, 5x its median), then restored. Prints

* cost: CPU time (``time.thread_time``) of ``before`` + ``after`` inside real steps, in ms and in
  percent of the step -- after the error steps, ``--cost-steps`` more where each step runs ONE of
  the two (alternating), so that the cache state is the one a real step leaves;
* error: median and largest ``|sampled / exact - 1|`` over the steps, and the jump step's ratio
  over the median of the 32 steps before it, exact and sampled.

    nice -n 10 python benchmarks/update_ratio_cost.py [--shape outside] [--steps 300] [--seed 0]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from lossguard.demo.model import GPTConfig, TinyGPT
from lossguard.guard.update_ratio import UpdateRatio

SHAPES = {"mild": {"n_layer": 3, "n_head": 4, "n_embd": 64, "batch": 16, "seq": 64},
          "outside": {"n_layer": 4, "n_head": 3, "n_embd": 96, "batch": 8, "seq": 128}}
"""The shapes of ``precursor_overhead.py``."""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="mild")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=8)
    ap.add_argument("--jump", type=int, default=200, help="step whose LR is multiplied by --factor")
    ap.add_argument("--factor", type=float, default=10.0)
    ap.add_argument("--cost-steps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    s = SHAPES[a.shape]
    model = TinyGPT(GPTConfig(n_layer=s["n_layer"], n_head=s["n_head"], n_embd=s["n_embd"], block_size=s["seq"]))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    params = list(model.parameters())
    exact, sampled = UpdateRatio(params, sample_every=1), UpdateRatio(params, sample_every=a.every)
    data = torch.randint(0, 256, (64, s["batch"], s["seq"]), generator=torch.Generator().manual_seed(a.seed))
    cost: dict[str, list[float]] = {"exact": [], "sampled": []}
    step_cpu: list[float] = []
    r_exact, r_sampled = [], []
    for i in range(a.steps + a.cost_steps):
        c0 = time.thread_time()
        x = data[i % len(data)]
        _, loss = model(x, x)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        # the timed one goes first; refresh on 2 steps of 8 so that each way refreshes every 4th of its own
        first, second = (exact, sampled) if i % 2 else (sampled, exact)
        c = time.thread_time()
        first.before(refresh=(i // 2) % 4 == 0)
        t_before = time.thread_time() - c
        if i < a.steps:
            second.before(refresh=(i // 2) % 4 == 0)
        for g in opt.param_groups:
            g["lr"] = 1e-3 * (a.factor if i == a.jump else 1.0)
        opt.step()
        c = time.thread_time()
        r1 = first.after()
        t_after = time.thread_time() - c
        opt.zero_grad(set_to_none=True)
        if i >= a.steps:
            cost["sampled" if first is sampled else "exact"].append(t_before + t_after)
            step_cpu.append(time.thread_time() - c0)
            continue
        r2 = second.after()
        re, rs = (r2, r1) if first is sampled else (r1, r2)
        r_exact.append(float(re))  # read here only to compare; the guard reads its packed tensor once
        r_sampled.append(float(rs))
    step = statistics.median(step_cpu)
    for k, v in cost.items():
        print(f"{a.shape} {k}: {statistics.median(v) * 1e3:.3f} ms per step (before + after) = "
              f"{100 * statistics.median(v) / step:.2f}% of a {step * 1e3:.1f} ms step (median)")
    err = [abs(s_ / e - 1) for s_, e in zip(r_sampled[1:], r_exact[1:], strict=True)]
    print(f"error |sampled/exact - 1| over {len(err)} steps: median {100 * statistics.median(err):.2f}%, "
          f"largest {100 * max(err):.2f}%")
    if 32 <= a.jump < a.steps:
        for name, r in (("exact", r_exact), ("sampled", r_sampled)):
            base = statistics.median(r[a.jump - 32:a.jump])
            print(f"LR x{a.factor:g} at step {a.jump}: {name} ratio {r[a.jump]:.3e} = {r[a.jump] / base:.2f}x its "
                  f"32-step median")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
