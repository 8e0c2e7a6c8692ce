"""False stalls on the curve generator's families (issue 20): how many clean runs the stall rule names.

For every family of :mod:`evals.curves.families` (TUNE and TEST), ``--runs`` clean runs (no event
injected) are generated and :func:`lossguard.detect.stall.find_stalls` is run on the loss with the
logged LR. A clean run has no stall, so every one named is a false positive. ``--kinds`` adds runs
with an injected event of each kind (a stall may then be reported beside the event's incident).

    nice -n 10 python benchmarks/stall_families.py --runs 60 --kinds [--no-restart-rule | --lr-rise-factor F]
"""
from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from evals.curves.events import INJECTORS
from evals.curves.families import families
from evals.curves.generator import generate
from lossguard.detect.stall import StallConfig, find_stalls

CONFIG = StallConfig()


def _live(run, name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The last-written value per step (a relaunch's superseded rows dropped), in step order."""
    if name not in run.metrics:
        return None
    steps = np.asarray(run.steps)
    vals = np.asarray(run.metrics[name], dtype=np.float64)
    last = {int(s): i for i, s in enumerate(steps)}
    order = sorted(last)
    return np.array(order, dtype=np.float64), vals[[last[s] for s in order]]


def named(run) -> int | None:
    """Number of stalls the rule names on one generated run (None: the run has no plain loss series)."""
    loss = _live(run, "loss")
    if loss is None:
        return None
    return len(find_stalls(loss[0], loss[1], lr=_live(run, "lr"), cfg=CONFIG))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--kinds", action="store_true", help="also runs with each injectable event kind")
    ap.add_argument("--no-restart-rule", action="store_true",
                    help="without the LR-restart rule (StallConfig.lr_rise_factor = inf): the numbers before it")
    ap.add_argument("--lr-rise-factor", type=float, default=None, help="StallConfig.lr_rise_factor to use")
    a = ap.parse_args(argv)
    global CONFIG
    rise = float("inf") if a.no_restart_rule else a.lr_rise_factor
    CONFIG = StallConfig() if rise is None else StallConfig(lr_rise_factor=rise)
    total = Counter()
    print("| family | split | clean runs named |" + (" runs with an event named |" if a.kinds else ""))
    print("|---|---|---|" + ("---|" if a.kinds else ""))
    for fam in families():
        found = [x for x in (named(generate(fam, None, seed=s)) for s in range(a.runs)) if x is not None]
        clean = sum(x > 0 for x in found)
        total["clean"] += clean
        total["runs"] += len(found)
        row = f"| {fam.name} | {fam.split.value} | {clean}/{len(found)} |"
        if a.kinds:
            hits = n = 0
            for kind in INJECTORS:
                for s in range(max(1, a.runs // 10)):
                    try:
                        x = named(generate(fam, kind, seed=s))
                    except (ValueError, KeyError):
                        continue
                    if x is None:
                        continue
                    n += 1
                    hits += x > 0
            row += f" {hits}/{n} |"
        print(row, flush=True)
    print(f"clean runs named, all families: {total['clean']}/{total['runs']} (runs with a plain loss series; "
          f"the others log per-stream losses only)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
