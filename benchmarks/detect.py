"""Detection quality: lossguard's ``analyze()`` against the rules frameworks use today.

Generates ``--runs`` labelled synthetic runs (:func:`evals.synthetic.generate_suite`,
seeds from ``--seed``, default 10,000, never used while developing the detectors), runs every
method on every run, scores them all with the same matcher (:mod:`evals.scoring`) and
prints markdown tables:

1. the loss-spike umbrella (any loss-spike kind for any true loss-spike kind): precision, recall, F1,
   detection delay, clean runs with a false alarm, time per run;
2. strict F1 per kind (kind must match), "-" where a method does not claim the kind;
3. the share of true events of each kind found at all (a loss spike by any loss-spike claim);
4. lossguard's F1 over the best alternative, per kind it is compared on.

    .venv/bin/python benchmarks/detect.py --runs 500 --seed 10000
    .venv/bin/python benchmarks/detect.py --quick
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root: evals/, the lab

from baselines import ALL as BASELINES  # noqa: E402

from lossguard.classify.incident import IncidentKind as K  # noqa: E402
from evals.scoring import SuiteScore, score_run  # noqa: E402
from evals.synthetic import SPIKE_KINDS, generate_suite  # noqa: E402

LOSSGUARD = "lossguard analyze()"


def lossguard_method() -> tuple[Callable[[Any], list], frozenset] | None:
    """``analyze`` if it exists in this tree, else None."""
    try:
        from lossguard.analysis import analyze  # type: ignore[attr-defined]
    except ImportError:
        return None
    return (lambda log: analyze(log).incidents), frozenset(["spike", *K])


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _d(x: float | None) -> str:
    return "-" if x is None else f"{x:+.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=500, help="number of generated runs (default 500)")
    ap.add_argument("--seed", type=int, default=10_000, help="suite seed (default 10000)")
    ap.add_argument("--quick", action="store_true", help="60 runs, for a smoke test")
    ap.add_argument("--only", nargs="*", help="substrings of method names to run")
    args = ap.parse_args(argv)
    n = 60 if args.quick else args.runs

    t0 = time.perf_counter()
    runs = generate_suite(n, seed=args.seed)
    t_gen = time.perf_counter() - t0

    methods: list[tuple[str, Callable, frozenset]] = []
    lg = lossguard_method()
    if lg is not None:
        methods.append((LOSSGUARD, lg[0], lg[1]))
    methods += [(b.NAME, b.detect, b.COVERS) for b in BASELINES]
    if args.only:
        methods = [m for m in methods if any(o.lower() in m[0].lower() for o in args.only)]

    scores: dict[str, SuiteScore] = {}
    seconds: dict[str, float] = {}
    errors: dict[str, int] = {}
    for name, fn, _ in methods:
        s, t, err = SuiteScore(), 0.0, 0
        for run in runs:
            t1 = time.perf_counter()
            try:
                preds = fn(run.log)
            except Exception as exc:  # a crash is a result too: no claims on that run
                err += 1
                if err == 1:
                    print(f"[{name}] failed on seed {run.seed}: {type(exc).__name__}: {exc}", file=sys.stderr)
                preds = []
            t += time.perf_counter() - t1
            score_run(run, preds, into=s)
            if s.runs % 100 == 0:
                print(f"[{name}] {s.runs}/{n} runs, {t:.0f} s", file=sys.stderr, flush=True)
        scores[name], seconds[name], errors[name] = s, t, err

    n_events = sum(len(r.events) for r in runs)
    n_clean = sum(not r.events for r in runs)
    print(f"## Detection quality: {n} runs (seed {args.seed}), {n_events} labelled events, "
          f"{n_clean} clean runs; generated in {t_gen:.1f} s")
    if lg is None:
        print("\n(lossguard.analysis.analyze is not in this tree yet: alternatives only)")
    print("\n### Loss spikes (umbrella: any loss-spike kind matches any true loss-spike kind)\n")
    print("| method | precision | recall | F1 | delay median (steps) | delay p90 | clean runs with a false alarm | ms/run | crashes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, _, covers in methods:
        s = scores[name]
        c = s.spike
        cra = f"{s.clean_runs_with_alarm}/{s.clean_runs}"
        print(f"| {name} | {_f(c.precision)} | {_f(c.recall)} | {_f(c.f1)} | {_d(c.delay(50))} | {_d(c.delay(90))} "
              f"| {cra} | {1000 * seconds[name] / n:.1f} | {errors[name]} |")

    print("\n### Strict F1 (precision/recall) per kind (the claimed kind must be the true kind; "
          "'-' = not claimed by the method)\n")
    print("| kind | events | " + " | ".join(m[0] for m in methods) + " |")
    print("|---|---|" + "---|" * len(methods))
    for kind in K:
        cells = []
        for name, _, covers in methods:
            classifies = kind in covers
            c = scores[name].per_kind[kind]
            cells.append(f"{_f(c.f1)} ({_f(c.precision)}/{_f(c.recall)})" if classifies else "-")
        total = scores[methods[0][0]].found_by_kind[kind][1] if methods else 0
        print(f"| {kind.value} | {total} | " + " | ".join(cells) + " |")

    if lg is not None:
        print("\n### lossguard per kind (strict)\n")
        print("| kind | events | precision | recall | F1 | delay median (steps) | delay p90 |")
        print("|---|---|---|---|---|---|---|")
        for kind in K:
            c = scores[LOSSGUARD].per_kind[kind]
            print(f"| {kind.value} | {c.tp + c.fn} | {_f(c.precision)} | {_f(c.recall)} | {_f(c.f1)} "
                  f"| {_d(c.delay(50))} | {_d(c.delay(90))} |")
        c = scores[LOSSGUARD].overall()
        print(f"| **all kinds** | {c.tp + c.fn} | {_f(c.precision)} | {_f(c.recall)} | {_f(c.f1)} "
              f"| {_d(c.delay(50))} | {_d(c.delay(90))} |")

    print("\n### Found at all (recall; a loss spike counts when any loss-spike claim matches it)\n")
    print("| kind | " + " | ".join(m[0] for m in methods) + " |")
    print("|---|" + "---|" * len(methods))
    for kind in K:
        cells = []
        for name, _, covers in methods:
            ok = kind in covers or (kind in SPIKE_KINDS and "spike" in covers)
            f, t = scores[name].found_by_kind[kind]
            cells.append(f"{f / t:.2f}" if ok and t else "-")
        print(f"| {kind.value} | " + " | ".join(cells) + " |")

    if lg is not None:
        print("\n### lossguard F1 / best alternative F1 (alternatives that claim the kind)\n")
        print("| class | lossguard F1 | best alternative | its F1 | ratio |")
        print("|---|---|---|---|---|")
        rows = [("spike (umbrella)", lambda s: s.spike.f1, "spike")] + \
               [(k.value, (lambda s, k=k: s.per_kind[k].f1), k) for k in K]
        for label, get, key in rows:
            mine = get(scores[LOSSGUARD])
            alts = [(get(scores[nm]) or 0.0, nm) for nm, _, cov in methods if nm != LOSSGUARD and key in cov]
            if not alts:
                print(f"| {label} | {_f(mine)} | (none claims it) | - | - |")
                continue
            best, who = max(alts)
            ratio = "inf" if best == 0 and (mine or 0) > 0 else ("-" if best == 0 else f"{(mine or 0) / best:.2f}x")
            print(f"| {label} | {_f(mine)} | {who} | {_f(best)} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
