"""One zoo configuration, unguarded and guarded, on several seeds or float-noise siblings: what did the judge do?

Runs ``evals.zoo`` spec(s) of one family / batch size / optimizer / schedule (healthy scenario),
each unguarded (per-step loss and grad norm recorded) and guarded (default ``GuardConfig``), and
prints the final held-out losses, the guard's decisions with their reasons, and the unguarded
trace around every guarded decision. A *sibling* (``--perturb K``) scales the model's first
parameter by ``1 + K * 1e-7`` after initialisation: the same run up to float noise, to see whether
an outcome belongs to the configuration or to one chaotic trajectory (a small-batch run at its
peak LR amplifies a 1e-7 difference into a different loss curve within ~100 steps).

    python benchmarks/zoo_one.py gpt/b8/adamw/warmup_constant --seeds 1 --keep /tmp/zoo_one   # guard logs kept
    python benchmarks/zoo_one.py gpt/b8/adamw/warmup_constant --seeds 1 --perturb 1,2,3,4 --jobs 2
    python benchmarks/zoo_one.py gpt/b8/adamw/warmup_constant --seeds 2,3,4,5,6,7 --jobs 2 --out /tmp/s.jsonl

Rows (``--out``, JSON lines) are :class:`evals.zoo.Outcome` dicts plus ``perturb``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root: evals/


def one(job: tuple) -> dict:
    """Run one (config, seed, perturb, guarded) job in a worker; returns the outcome dict."""
    config, seed, k, guarded, keep = job
    import torch

    from evals.zoo import FAMILIES, Optim, RunSpec, Schedule, run

    fam, bs, opt, sched = config.split("/")
    family = FAMILIES[fam]
    if k:
        orig = family.model

        def model():
            m = orig()
            with torch.no_grad():
                next(m.parameters()).mul_(1 + k * 1e-7)
            return m
        object.__setattr__(family, "model", model)  # the family is a frozen dataclass; this worker's copy only
    spec = RunSpec(family=fam, seed=seed, batch_size=int(bs.lstrip("b")), optimizer=Optim(opt),
                   schedule=Schedule(sched), steps=family.steps, guarded=guarded)
    workdir = None
    if keep and guarded:
        workdir = Path(keep) / f"{fam}_{bs}_{opt}_{sched}_s{seed}_k{k}"
        workdir.mkdir(parents=True, exist_ok=True)
    out = run(spec, workdir=workdir, record=not guarded).to_dict()
    out["perturb"] = k
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", help="family/bBATCH/optimizer/schedule, e.g. gpt/b8/adamw/warmup_constant")
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--perturb", default="0", help="comma-separated K of the float-noise siblings (0: the run itself)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--keep", help="keep each guarded run's checkpoints and guard.jsonl under this folder")
    ap.add_argument("--out", help="write the outcomes here (JSON lines)")
    ap.add_argument("--around", type=int, default=3, help="trace steps printed either side of a decision")
    a = ap.parse_args(argv)
    jobs = [(a.config, int(s), int(k), g, a.keep) for s in a.seeds.split(",") for k in a.perturb.split(",")
            for g in (False, True)]
    with ProcessPoolExecutor(a.jobs) as ex:
        rows = list(ex.map(one, jobs))
    if a.out:
        with open(a.out, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in rows)
    for u, g in zip(rows[::2], rows[1::2], strict=True):
        s = g["spec"]
        print(f"seed {s['seed']} perturb {g['perturb']}: unguarded {u['final_val']:.4f}, guarded {g['final_val']:.4f} "
              f"(skips {g['skips']}, rollbacks {g['rollbacks']}, LR cuts {g['lr_cuts']}, halted {g['halted']})")
        loss, gn = u["series"].get("loss", []), u["series"].get("grad_norm", [])
        for step, event, reasons in g["reasons"]:
            if event == "checkpoints_superseded":
                continue
            print(f"  step {step} {event}: {'; '.join(reasons)}")
            if event == "skip" and 0 <= step < len(loss):
                lo, hi = max(0, step - a.around), min(len(loss), step + a.around + 1)
                print("    unguarded loss  " + " ".join(f"{x:.2f}" for x in loss[lo:hi]) + f"  (steps {lo}-{hi - 1})")
                print("    unguarded gnorm " + " ".join(f"{x:.2f}" for x in gn[lo:hi]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
