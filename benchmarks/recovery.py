"""Does the guard save runs? The demo model, several seeds, with and without the guard.

Configurations (each for seeds ``0..N-1``; the model seed changes, the data order does not):

    clean                 clean data (the reference; ``SCENARIOS["clean"]``)
    clean_guarded         the same under the guard (what the guard costs a healthy run)
    pocket                ``SCENARIOS["bad_pocket"]`` (30 batches of random bytes), unguarded
    pocket_guarded        the same under the StabilityGuard (rollback + data skip), as the demo runs it:
                          the guard judges the loss only
    pocket_guarded_gn     the same with the guard's default: it judges the gradient norm too
    high_lr               the scenario's LR instability (``SCENARIOS["high_lr"]``), unguarded
    high_lr_guarded       the same LR jump under the guard (loss judged, default ladder)
    high_lr_guarded_lrcut the same, the first rollback cutting the LR 10x for the rest of the run
    high_lr_qk_layernorm  the same with QK-LayerNorm (Wortsman et al. 2023), unguarded
    high_lr_eps_free      the same with eps-free AdamW (Molybog et al. 2023), unguarded

Every run is :func:`lossguard.demo.train.train` (the code behind ``lossguard demo``), one torch
thread, ``--jobs`` runs at once. Prints one line per run as it finishes, then the table: final
held-out loss (mean, std, min..max), its ratio to the clean mean, the paired gap (each run against
the clean run of the same seed: mean and the largest in absolute value), diverged / halted counts,
rollbacks, steps lost to rollbacks, steps skipped (means per run), wall time. Raw per-run results go to ``--out`` (JSON lines).

    python benchmarks/recovery.py --seeds 5 --jobs 2 --out /tmp/recovery.jsonl

The rows behind the tables of ``benchmarks/RESULTS.md`` are checked in under ``benchmarks/results/``
(``recovery_runs*.jsonl``).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed


def configs():
    """``{name: (scenario, guard overrides or None for an unguarded run)}``."""
    from lossguard.demo.scenarios import SCENARIOS

    clean, pocket, high = SCENARIOS["clean"], SCENARIOS["bad_pocket"], SCENARIOS["high_lr"]
    loss_only = {"grad_norm": None}  # what `lossguard demo` uses (see DemoConfig.watch_grad_norm)
    return {
        "clean": (clean, None),
        "clean_guarded": (clean, loss_only),
        "pocket": (pocket, None),
        "pocket_guarded": (pocket, loss_only),
        "pocket_guarded_gn": (pocket, {}),
        "high_lr": (high, None),
        "high_lr_guarded": (high, loss_only),
        # Not the guard's defaults: a user who knows the LR is at fault lets the first rollback cut it
        # 10x for the rest of the run (the default ladder cuts 2x from the second rollback, 200 steps).
        "high_lr_guarded_lrcut": (high, {**loss_only, "lr_cut_from": 1, "lr_cut_factor": 0.1, "lr_cut_steps": 10_000}),
        "high_lr_qk_layernorm": (SCENARIOS.get("high_lr_qk_layernorm") or
                                 high.with_(name="high_lr_qk_layernorm", model=dict(qk_layernorm=True)), None),
        "high_lr_eps_free": (SCENARIOS.get("high_lr_eps_free") or
                             high.with_(name="high_lr_eps_free", optimizer="adamw_eps_free"), None),
    }


def one(name: str, seed: int, steps: int | None) -> dict:
    """Run configuration ``name`` with model seed ``seed``; returns the run's summary."""
    import torch

    torch.set_num_threads(1)
    from lossguard.demo.train import demo_guard_config, train

    sc, overrides = configs()[name]
    guarded = overrides is not None
    sc = sc.with_(seed=seed)
    if steps is not None:
        sc = sc.with_(steps=steps)
    with tempfile.TemporaryDirectory(prefix="lossguard-recovery-") as tmp:
        res = train(sc, guarded=guarded, ckpt_dir=f"{tmp}/ckpt",
                    guard_config=demo_guard_config(sc, **overrides) if guarded else None)
    d = res.to_dict()
    d["config"] = name
    d["scenario_key"] = scenario_key(sc.with_(seed=0, steps=sc.steps))
    d["n_skipped"] = len(res.skipped_steps)
    d["n_rollbacks"] = len(res.rollbacks)
    d.pop("val_loss", None)
    d.pop("diagnosis", None)
    return d


def scenario_key(sc) -> str:
    """What a result depends on besides the seed (so --resume never mixes old and new settings)."""
    return repr((sc.steps, sc.lr, sc.warmup, sc.lr_jumps, sc.pocket, sorted(sc.model.items()), sc.optimizer,
                 sc.batch_size, sc.seq_len, sc.grad_clip, sc.data_seed, sc.eval_batches))


def table(rows: list[dict], order: list[str]) -> str:
    """The summary table (text) of the per-run rows."""
    by = {}
    for r in rows:
        by.setdefault(r["config"], []).append(r)
    clean = [r["final_val_loss"] for r in by.get("clean", []) if r["final_val_loss"] is not None]
    ref = statistics.mean(clean) if clean else math.nan
    clean_of = {r["seed"]: r["final_val_loss"] for r in by.get("clean", []) if r["final_val_loss"] is not None}
    head = (f"{'config':22s} {'runs':>4s} {'held-out mean':>13s} {'std':>6s} {'min..max':>13s} {'vs clean':>8s} "
            f"{'paired':>7s} {'worst':>7s} {'diverged':>8s} {'halted':>6s} {'rollbk':>6s} {'lost':>5s} {'skipped':>7s} "
            f"{'wall s':>6s}")
    out = [head, "-" * len(head)]
    for name in order:
        rs = by.get(name)
        if not rs:
            continue
        fin = [r["final_val_loss"] for r in rs if r["final_val_loss"] is not None]
        div = sum(r["diverged"] for r in rs)
        halt = sum(r["halted"] for r in rs)
        if fin:
            mean, std = statistics.mean(fin), (statistics.stdev(fin) if len(fin) > 1 else 0.0)
            rng = f"{min(fin):.3f}..{max(fin):.3f}"
            vs = f"{100 * (mean / ref - 1):+.1f}%" if ref == ref else "n/a"
        else:
            mean = std = math.nan
            rng, vs = "-", "diverged"
        note = "" if len(fin) == len(rs) else f" ({len(rs) - len(fin)} non-finite excluded)"
        # Paired: each run against the clean run of the same seed (seeds differ more than configs do).
        gaps = [r["final_val_loss"] / clean_of[r["seed"]] - 1 for r in rs
                if r["final_val_loss"] is not None and r["seed"] in clean_of]
        paired = f"{100 * statistics.mean(gaps):+.1f}%" if gaps else "n/a"
        worst = f"{100 * max(gaps, key=abs):+.1f}%" if gaps else "n/a"
        out.append(f"{name:22s} {len(rs):4d} {mean:13.4f} {std:6.3f} {rng:>13s} {vs:>8s} {paired:>7s} {worst:>7s} "
                   f"{div:8d} {halt:6d} "
                   f"{statistics.mean(r['n_rollbacks'] for r in rs):6.1f} "
                   f"{statistics.mean(r['steps_lost'] for r in rs):5.0f} "
                   f"{statistics.mean(r['n_skipped'] for r in rs):7.1f} "
                   f"{statistics.mean(r['wall_time_s'] for r in rs):6.1f}{note}")
    return "\n".join(out)


def main(argv=None) -> int:
    """Command line; see the module docstring."""
    names = list(configs())
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=5, help="model seeds 0..N-1 per configuration")
    p.add_argument("--jobs", type=int, default=2, help="runs at once (one torch thread each)")
    p.add_argument("--configs", nargs="*", default=names, choices=names, metavar="NAME",
                   help=f"subset of {names}")
    p.add_argument("--steps", type=int, default=None, help="override the scenarios' step count (quick check)")
    p.add_argument("--out", default=None, help="append per-run JSON lines here")
    p.add_argument("--resume", action="store_true", help="skip runs already in --out")
    p.add_argument("--table", action="store_true", help="only print the table of the runs in --out")
    a = p.parse_args(argv)
    rows, done = [], set()
    if a.resume and a.out:
        try:
            with open(a.out, encoding="utf-8") as fh:
                rows = [json.loads(line) for line in fh if line.strip()]
            cur = {n: scenario_key(sc) for n, (sc, _) in configs().items()}
            rows = [r for r in rows if r.get("scenario_key") == cur.get(r["config"])]
            done = {(r["config"], r["seed"]) for r in rows}
        except FileNotFoundError:
            pass
    if a.table:
        print(table(rows, a.configs))
        return 0
    todo = [(n, s) for s in range(a.seeds) for n in a.configs if (n, s) not in done]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=a.jobs) as pool:
        futs = {pool.submit(one, n, s, a.steps): (n, s) for n, s in todo}
        for f in as_completed(futs):
            r = f.result()
            rows.append(r)
            print(f"{r['config']:22s} seed {r['seed']}  held-out {r['final_val_loss']}  diverged={r['diverged']} "
                  f"halted={r['halted']} rollbacks={r['n_rollbacks']} lost={r['steps_lost']} "
                  f"skipped={r['n_skipped']}  {r['wall_time_s']:.0f}s", flush=True)
            if a.out:
                with open(a.out, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(r) + "\n")
    print(f"\n{len(todo)} runs in {time.perf_counter() - t0:.0f} s wall ({a.jobs} at once)\n")
    print(table(rows, a.configs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
