"""Speed of ``lossguard simulate`` on a 1,000,000-step run (loss + grad norm), after reading.

Builds the RunLog in memory with ``benchmarks/analyze_speed.py``'s generator (twenty decaying
spikes of 1.3-3x on a power-law loss, log-normal grad norm), then times ``simulate()`` with the
guard's default configuration, best of ``--repeat`` runs. For comparison, in the same run: the
guard's own per-step path, :class:`HostJudge.judge` fed point by point (what a replay through the
live judge would cost), timed on the first ``--online-points`` points and scaled linearly to the
full length (stated as such).

    .venv/bin/python benchmarks/simulate_speed.py
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from analyze_speed import best, make_log  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--online-points", type=int, default=50_000)
    args = ap.parse_args()

    from lossguard.guard.config import GuardConfig
    from lossguard.guard.judge import HostJudge
    from lossguard.simulate import simulate
    from lossguard.stitch import stitch

    log = stitch(make_log(args.steps))
    cfg = GuardConfig()
    sim = simulate(log, cfg)
    t = best(lambda: simulate(log, cfg), args.repeat)
    s = sim.summary()["actions"]
    print(f"simulate, {args.steps:,} steps (loss + grad norm): {t:.3f} s (best of {args.repeat}); "
          f"{s['skip']} skips, {s['rollback']} rollbacks, {s['lr_cut']} LR cuts, {s['halt']} halts")
    n = min(args.online_points, args.steps)
    loss, gn = log.series["loss"].values[:n].tolist(), log.series["grad_norm"].values[:n].tolist()
    judge = HostJudge(cfg.loss, cfg.grad_norm)
    t0 = time.perf_counter()
    for a, b in zip(loss, gn):
        judge.judge(a, b)
    per = (time.perf_counter() - t0) / n
    print(f"live host judge point by point: {per * 1e6:.1f} us/step -> {per * args.steps:.1f} s for "
          f"{args.steps:,} steps (scaled from {n:,})")


if __name__ == "__main__":
    main()
