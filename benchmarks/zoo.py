"""Does the guard leave healthy runs alone, and does it rescue faulty ones, on models it was not tuned on?

Runs the model zoo (``evals.zoo``: MLP, CNN, tiny GPT, TransformerEncoder classifier --
tuned -- and LSTM, HF GPT-2 under ``transformers.Trainer`` -- held out of all tuning) with the
guard's default ``GuardConfig``, the README's loop, one torch thread per run, ``--jobs`` runs at once.

Grid, per family (``F.batch_sizes`` x {AdamW, SGD+momentum}):
    healthy      seeds 0,1 (warm-up+cosine or warm-up+constant LambdaLR, alternating): unguarded
                 (the clean reference) and guarded -- 12 healthy guarded runs per family
    bad_pocket   seed 0: 20 garbage batches at 60% of the run, unguarded and guarded, and (plain-loop
                 families) the oracle control: unguarded with the pocket's batches dropped exactly,
                 the best any data skip can do -- the floor of the "within 2% of clean" figure
    lr_jump      seed 0: the LR x10/x20/x30 from mid-run, unguarded and guarded
    early_nan    seed 0: a NaN gradient at one of steps 0-5, guarded
    early_huge   seed 0: a 1e6x gradient at one of steps 0-5, unguarded and guarded

``--scenario-seeds`` runs the fault scenarios on more seeds (each with its clean reference);
``--config`` gives the guarded runs a guard configuration (TOML, as ``lossguard simulate --config``).

Prints one line per run as it finishes, then the summary against the issue's goals, tuned and
held-out families side by side; raw outcomes go to ``--out`` (JSON lines; ``--summary FILE`` re-prints
the summary of a saved file without training).

    python benchmarks/zoo.py --jobs 2 --out /tmp/zoo.jsonl
    python benchmarks/zoo.py --summary /tmp/zoo.jsonl
    python benchmarks/zoo.py --guarded-only --out /tmp/zoo2.jsonl   # after a guard change
    python benchmarks/zoo.py --summary /tmp/zoo.jsonl /tmp/zoo2.jsonl
    python benchmarks/zoo.py --scenarios bad_pocket,lr_jump --scenario-seeds 0,1,2 --out /tmp/z3.jsonl
    python benchmarks/zoo.py --scenarios bad_pocket,lr_jump --scenario-seeds 0,1,2 --guarded-only \
        --config guard.toml --out /tmp/z3b.jsonl          # another guard configuration, same references
    python benchmarks/zoo.py --summary /tmp/z3.jsonl /tmp/z3b.jsonl

The rows behind the tables of ``benchmarks/RESULTS.md`` are checked in under ``benchmarks/results/``
(``zoo_runs*.jsonl``); ``--summary`` re-prints them, e.g.
``python benchmarks/zoo.py --summary benchmarks/results/zoo_runs_3seeds.jsonl``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root: evals/, the lab

WITHIN = 0.02
"""A rescued run ends within this relative distance of its clean reference (the issue's 2%)."""


def grid(families=None, scenarios=None, scenario_seeds=(0,)):
    """Every RunSpec of the benchmark, in a stable order: healthy runs on seeds 0 and 1, the fault
    scenarios on ``scenario_seeds`` (each with its unguarded healthy reference)."""
    from evals.zoo import FAMILIES, Optim, RunSpec, Scenario, Schedule, Trainer

    names = families or list(FAMILIES)
    wanted = set(scenarios or [s.value for s in Scenario])
    specs = []
    for name in names:
        fam = FAMILIES[name]
        for i, bs in enumerate(fam.batch_sizes):
            for opt in Optim:
                for seed in sorted({0, 1} | set(scenario_seeds)):
                    sched = Schedule.WARMUP_COSINE if (seed + i) % 2 == 0 else Schedule.WARMUP_CONSTANT
                    base = RunSpec(family=name, seed=seed, batch_size=bs, optimizer=opt, schedule=sched,
                                   steps=fam.steps)
                    if "healthy" in wanted and seed in (0, 1):
                        specs += [base, base.with_(guarded=True)]
                    elif seed in scenario_seeds:
                        specs.append(base)  # the clean reference of this seed's fault runs
                    if seed not in scenario_seeds:
                        continue
                    for sc in (Scenario.BAD_POCKET, Scenario.LR_JUMP, Scenario.EARLY_HUGE):
                        if sc.value in wanted:
                            specs += [base.with_(scenario=sc), base.with_(scenario=sc, guarded=True)]
                    if Scenario.BAD_POCKET.value in wanted and fam.trainer is Trainer.PLAIN:
                        specs.append(base.with_(scenario=Scenario.BAD_POCKET, oracle=True))
                    if Scenario.EARLY_NAN.value in wanted:
                        specs.append(base.with_(scenario=Scenario.EARLY_NAN, guarded=True))
    return specs


def one(spec_dict: dict, config_path: str | None = None) -> dict:
    """Run one spec (in a worker process) with the guard's defaults, or the guard configuration in
    ``config_path`` (TOML, as ``lossguard simulate --config`` reads it); returns its outcome as a dict."""
    import torch

    torch.set_num_threads(1)
    from lossguard.guard.config_file import load_config
    from evals.zoo import Outcome, run

    spec = Outcome.from_dict({"spec": spec_dict}).spec
    config = load_config(config_path) if config_path and spec.guarded else None
    return run(spec, config=config).to_dict()


def _spec_dict(spec) -> dict:
    return {k: getattr(v, "value", v) for k, v in spec.__dict__.items()}


def _ref_key(s: dict) -> tuple:
    return (s["family"], s["seed"], s["batch_size"], s["optimizer"], s["schedule"], s["steps"])


def _pct(n: int, d: int) -> str:
    return f"{n}/{d}" + (f" ({100 * n / d:.0f}%)" if d else "")


def summarise(rows: list[dict]) -> str:
    """The summary tables, tuned and held-out families side by side."""
    from evals.zoo import FAMILIES

    clean = {_ref_key(r["spec"]): r["final_val"] for r in rows
             if r["spec"]["scenario"] == "healthy" and not r["spec"]["guarded"]}

    def gap(r):
        ref, v = clean.get(_ref_key(r["spec"])), r["final_val"]
        if ref is None:
            return None
        return math.inf if v is None else v / ref - 1.0

    groups = {"tuned": [n for n, f in FAMILIES.items() if f.tuned],
              "held-out": [n for n, f in FAMILIES.items() if not f.tuned]}
    lines = []
    for gname, fams in groups.items():
        sel = [r for r in rows if r["spec"]["family"] in fams]
        lines.append(f"\n== {gname} families: {', '.join(fams)} ==")
        healthy = [r for r in sel if r["spec"]["scenario"] == "healthy" and r["spec"]["guarded"]]
        if healthy:
            bad = [r for r in healthy if r["interventions"]]
            steps = sum(r["steps"] for r in healthy)
            skips = sum(r["skips"] for r in healthy)
            worse = [g for g in (gap(r) for r in healthy) if g is not None]
            rbs, cuts = sum(r["rollbacks"] for r in healthy), sum(r["lr_cuts"] for r in healthy)
            lines.append(f"healthy guarded runs: {len(healthy)}; with a rollback/LR cut/halt: "
                         f"{_pct(len(bad), len(healthy))} (rollbacks {rbs}, LR cuts {cuts}, "
                         f"halts {sum(bool(r['halted']) for r in healthy)}); skips {skips}/{steps} steps "
                         f"({100 * skips / max(1, steps):.2f}%); worst gap to unguarded "
                         f"{max(worse, default=0) * 100:+.1f}%")
            for r in bad:
                lines.append(f"    {_key(r)}: rb {r['rollbacks']} cut {r['lr_cuts']} halt {r['halted']} "
                             f"gap {_pct_gap(gap(r))}")
        for sc in ("bad_pocket", "lr_jump"):
            g = [r for r in sel if r["spec"]["scenario"] == sc and r["spec"]["guarded"]]
            u = [r for r in sel if r["spec"]["scenario"] == sc and not r["spec"]["guarded"]
                 and not r["spec"].get("oracle")]
            o = [r for r in sel if r["spec"]["scenario"] == sc and r["spec"].get("oracle")]
            if not g:
                continue
            gg, ug = [gap(r) for r in g], [gap(r) for r in u]
            if o:
                og = [gap(r) for r in o]
                lines.append(f"{sc} oracle control (unguarded, the pocket dropped exactly): within 2% of clean "
                             f"{_pct(_n_within(og), len(o))}; median gap "
                             f"{_median(og) * 100:+.1f}%; misses: " + (", ".join(
                                 f"{_key(r)} {_pct_gap(gap(r))}" for r in o if (gap(r) or 0) > WITHIN) or "none"))
            lines.append(f"{sc}: guarded within 2% of clean {_pct(_n_within(gg), len(g))}, "
                         f"unguarded within 2% {_pct(_n_within(ug), len(u))}; "
                         f"guarded halts {sum(bool(r['halted']) for r in g)}; median gap guarded "
                         f"{_median(gg) * 100:+.1f}% vs unguarded {_median(ug) * 100:+.1f}%")
            for r in g:
                lines.append(f"    {_key(r)}: gap {_pct_gap(gap(r))} (unguarded {_gap_of(u, r, gap)}) "
                             f"skips {r['skips']} rb {r['rollbacks']} cut {r['lr_cuts']} halt {r['halted']}")
        for sc in ("early_nan", "early_huge"):
            g = [r for r in sel if r["spec"]["scenario"] == sc and r["spec"]["guarded"]]
            u = [r for r in sel if r["spec"]["scenario"] == sc and not r["spec"]["guarded"]]
            if not g:
                continue
            skipped = sum(bool(r["fault_skipped"]) for r in g)
            lines.append(f"{sc}: fault step skipped {_pct(skipped, len(g))}; guarded within 2% "
                         f"{_pct(_n_within(map(gap, g)), len(g))}"
                         + (f", unguarded within 2% {_pct(_n_within(map(gap, u)), len(u))}"
                            if u else "") + f"; halts {sum(bool(r['halted']) for r in g)}")
            for r in g:
                if not r["fault_skipped"] or (gap(r) or 0) > WITHIN:
                    lines.append(f"    {_key(r)}: fault at {r['fault_steps']} skipped={r['fault_skipped']} "
                                 f"gap {_pct_gap(gap(r))}")
    return "\n".join(lines)


def _n_within(gaps) -> int:
    """How many of ``gaps`` (None: no clean reference) end within ``WITHIN`` of clean."""
    return sum(x is not None and x <= WITHIN for x in gaps)


def _pct_gap(g) -> str:
    return "n/a" if g is None else f"{g * 100:+.1f}%"


def _median(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else math.nan


def _gap_of(unguarded, r, gap):
    for u in unguarded:
        if _ref_key(u["spec"]) == _ref_key(r["spec"]):
            return _pct_gap(gap(u))
    return "n/a"


def _key(r: dict) -> str:
    s = r["spec"]
    return f"{s['family']}/b{s['batch_size']}/{s['optimizer']}/{s['schedule']}/s{s['seed']}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (one thread each)")
    ap.add_argument("--out", help="write every outcome here (JSON lines)")
    ap.add_argument("--families", help="comma-separated subset of families")
    ap.add_argument("--scenarios", help="comma-separated subset of scenarios (healthy is always needed as reference)")
    ap.add_argument("--summary", nargs="+", help="print the summary of saved --out file(s) and exit (later "
                    "files' runs replace earlier ones of the same spec)")
    ap.add_argument("--scenario-seeds", default="0",
                    help="comma-separated seeds of the fault scenarios (default 0; each adds its clean references)")
    ap.add_argument("--config", help="guard configuration (TOML) for the guarded runs; default: GuardConfig()")
    ap.add_argument("--guarded-only", action="store_true",
                    help="run only the guarded runs (the unguarded references come from an earlier --out)")
    ap.add_argument("--update-size", action="store_true",
                    help="plain-loop guarded runs also get the opt-in UpdateSizeTest (issue 20)")
    ap.add_argument("--jump-offset", type=int, default=0,
                    help="move the LR jump this many steps after mid-run (off the checkpoint grid)")
    a = ap.parse_args(argv)
    if a.jump_offset:
        from evals.zoo.scenarios import JUMP_OFFSET_ENV
        os.environ[JUMP_OFFSET_ENV] = str(a.jump_offset)  # before the worker pool starts: the workers inherit it
    if a.update_size:
        from evals.zoo.adapter import UPDATE_SIZE_ENV
        os.environ[UPDATE_SIZE_ENV] = "1"  # before the worker pool starts: the workers inherit it
    if a.summary:
        rows = {}
        for path in a.summary:
            with open(path, encoding="utf-8") as fh:
                for line in fh:
                    if line.strip():
                        r = json.loads(line)
                        r["spec"].setdefault("oracle", False)  # files written before the oracle control
                        rows[json.dumps(r["spec"], sort_keys=True)] = r
        print(summarise(list(rows.values())))
        return 0
    specs = grid(a.families.split(",") if a.families else None,
                 a.scenarios.split(",") if a.scenarios else None,
                 tuple(int(x) for x in a.scenario_seeds.split(",")))
    if a.guarded_only:
        specs = [s for s in specs if s.guarded]
    print(f"{len(specs)} runs, {a.jobs} at once", flush=True)
    t0, rows = time.time(), []
    out = open(a.out, "w", encoding="utf-8") if a.out else None
    with ProcessPoolExecutor(a.jobs) as ex:
        futs = [ex.submit(one, _spec_dict(s), a.config) for s in specs]
        for f in as_completed(futs):
            r = f.result()
            rows.append(r)
            if out:
                out.write(json.dumps(r) + "\n")
                out.flush()
            print(f"[{len(rows)}/{len(specs)} {time.time() - t0:.0f}s] {_key(r)} {r['spec']['scenario']} "
                  f"{'G' if r['spec']['guarded'] else 'U'} val {r['final_val']} steps {r['steps']} skips {r['skips']} "
                  f"rb {r['rollbacks']} cut {r['lr_cuts']} halt {r['halted']} ({r['wall_time']:.1f}s)", flush=True)
    if out:
        out.close()
    print(summarise(rows))
    print(f"\nwall time {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
