"""Held-out detection quality: ``analyze()`` on the curve families of issue 11, TUNE and TEST apart.

Generates ``--runs`` runs per family (:mod:`evals.curves`: seeds fixed per split and
disjoint; run i injects a clean run or one event kind in turn), writes each in a real log format
(CSV, JSONL, HF trainer_state.json, Megatron text, rotating), reads it back with ``read_log``, runs
``analyze`` and scores one-to-one within ``max(10 logged points, 1% of the run)`` (+5% of the run
after a divergence's turn, + the cascade of a loss-scale collapse), the convention of
:mod:`evals.scoring`. Prints, per split: kind-blind detection P/R/F1, strict per-kind
P/R/F1, clean runs with a false alarm, and the onset error per kind (claim onset - true onset over
matched pairs: median signed, median and p90 of |error|, in steps and in % of the run's steps).

Tune on TUNE only. TEST is the held-out score.

    .venv/bin/python benchmarks/detect_families.py --families tune --runs 56
    .venv/bin/python benchmarks/detect_families.py --families test --runs 56 --json test.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root: evals/, the lab

import numpy as np

from lossguard.analysis import analyze  # noqa: E402
from evals.curves import KIND_CYCLE, EventKind, Split, Tally, claims, families, run_family, score  # noqa: E402


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _q(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def evaluate(split: Split, runs: int) -> dict:
    """Score ``analyze`` on ``runs`` runs of every family of ``split``."""
    blind, per_kind = Tally(), defaultdict(Tally)
    clean_runs = clean_alarmed = clean_alarms = 0
    per_family = {}
    crashes = []
    t0 = time.perf_counter()

    def predict(log):
        try:
            return analyze(log).incidents
        except Exception as exc:  # noqa: BLE001 - a crash is a result to report, not to hide
            crashes.append(f"{type(exc).__name__}: {exc}")
            return []

    for fam in families(split):
        fb = Tally()
        for i, run, incidents in run_family(fam, runs, predict):
            s = score(run, claims(incidents))
            blind.add(s.blind)
            fb.add(s.blind)
            for k, t in s.per_kind.items():
                per_kind[k].add(t)
            if s.clean:
                clean_runs += 1
                clean_alarmed += bool(s.clean_alarms)
                clean_alarms += s.clean_alarms
        per_family[fam.name] = {"f1": fb.f1, "precision": fb.precision, "recall": fb.recall}
    kinds = [k.value for k in EventKind] + sorted(set(per_kind) - {k.value for k in EventKind})
    out_kinds = {}
    for k in kinds:
        t = per_kind.get(k, Tally())
        abs_e, abs_p = [abs(e) for e in t.errors], [abs(p) for p in t.errors_pct]
        out_kinds[k] = {"tp": t.tp, "fp": t.fp, "fn": t.fn, "f1": t.f1, "precision": t.precision,
                        "recall": t.recall, "onset_err_median": _q(t.errors, 50),
                        "abs_err_median": _q(abs_e, 50), "abs_err_p90": _q(abs_e, 90),
                        "abs_err_pct_median": _q(abs_p, 50), "abs_err_pct_p90": _q(abs_p, 90),
                        "nearest_n": len(t.nearest), "nearest_signed_median": _q(t.nearest, 50),
                        "nearest_abs_pct_median": _q([abs(x) for x in t.nearest_pct], 50),
                        "nearest_abs_pct_p90": _q([abs(x) for x in t.nearest_pct], 90)}
    return {"split": split.value, "runs_per_family": runs, "families": [f.name for f in families(split)],
            "runs": runs * len(families(split)), "seconds": time.perf_counter() - t0,
            "blind": {"tp": blind.tp, "fp": blind.fp, "fn": blind.fn, "ignored": blind.ignored, "f1": blind.f1,
                      "precision": blind.precision, "recall": blind.recall},
            "per_family": per_family, "per_kind": out_kinds,
            "clean": {"runs": clean_runs, "with_alarm": clean_alarmed, "alarms": clean_alarms},
            "crashes": crashes}


def table(res: dict) -> str:
    """Markdown tables for one split."""
    b, c = res["blind"], res["clean"]
    lines = [f"**{res['split'].upper()}** ({res['runs']} runs: {res['runs_per_family']} per family of "
             f"{', '.join(res['families'])}; {res['seconds']:.0f} s)", "",
             f"- kind-blind detection: F1 {_f(b['f1'])} (P {_f(b['precision'])}, R {_f(b['recall'])}; "
             f"tp {b['tp']}, fp {b['fp']}, fn {b['fn']}; {b['ignored']} claims on don't-care events not counted)",
             f"- clean runs with a false alarm: {c['with_alarm']} of {c['runs']} ({c['alarms']} alarms)",
             "- per family kind-blind F1: " + ", ".join(f"{k} {_f(v['f1'])}" for k, v in res["per_family"].items()),
             f"- analyze crashed on {len(res['crashes'])} runs"
             + (f" (first: {res['crashes'][0]})" if res["crashes"] else ""),
             "", "Onset error = claim onset - true onset. *Matched*: over matched pairs (bounded by the tolerance). "
             "*Nearest*: the nearest claim of the event's kind anywhere in the run, one per event that has one "
             "(n), so a dating outside the tolerance still shows.", "",
             "| kind | F1 | P | R | tp/fp/fn | matched: median (signed) | abs median | abs p90 | abs median % | abs p90 % "
             "| nearest: n | median (signed) | abs median % | abs p90 % |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    def s(x, pct=False, signed=False):
        if x is None:
            return "-"
        return f"{x:.2f}%" if pct else (f"{x:+.0f}" if signed else f"{x:.0f}")

    for k, v in res["per_kind"].items():
        lines.append(f"| {k} | {_f(v['f1'])} | {_f(v['precision'])} | {_f(v['recall'])} | "
                     f"{v['tp']}/{v['fp']}/{v['fn']} | "
                     f"{s(v['onset_err_median'], signed=True)} | {s(v['abs_err_median'])} | {s(v['abs_err_p90'])} | "
                     f"{s(v['abs_err_pct_median'], True)} | {s(v['abs_err_pct_p90'], True)} | "
                     f"{v['nearest_n']} | {s(v['nearest_signed_median'], signed=True)} | "
                     f"{s(v['nearest_abs_pct_median'], True)} | {s(v['nearest_abs_pct_p90'], True)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", choices=["tune", "test", "all"], default="tune",
                    help="which split to score (default: tune; test is the held-out score)")
    ap.add_argument("--runs", type=int, default=len(KIND_CYCLE) * 4,
                    help=f"runs per family (default {len(KIND_CYCLE) * 4}: every kind and a clean run 4 times)")
    ap.add_argument("--json", help="also write the numbers to this JSON file (never overwritten)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be >= 1")
    if args.json and os.path.exists(args.json):
        ap.error(f"{args.json} exists; lossguard never overwrites a file, give a new name")
    splits = [Split.TUNE, Split.TEST] if args.families == "all" else [Split(args.families)]
    results = [evaluate(s, args.runs) for s in splits]
    print("\n\n".join(table(r) for r in results))
    if args.json:
        with open(args.json, "x", encoding="utf-8") as fh:
            json.dump(results if len(results) > 1 else results[0], fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
