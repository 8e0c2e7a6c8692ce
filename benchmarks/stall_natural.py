"""Stalls on the natural-instability logs (issue 20): the ground truth beside what ``analyze`` names.

Ground truth, stated independently of the detector: a run **sits on a plateau at its peak LR** when,
over its peak-LR phase P (from the first step at the peak LR, the end of the warm-up, to the last
step with the LR at 50% of the peak or more), (i) its loss falls by less than a third of what the
best-LR run of the same seed and configuration falls over the same steps, and (ii) it ends P at least
10% above that run. A level at P's start or end is the median loss over the first or last 10% of P.
The best-LR run is the one with the lowest median loss over the last 10% of its log (by seed and
configuration), or ``--best-lr``.

For every log ``<config>_lr<LR>_s<seed>.jsonl`` of each folder: the verdict, the numbers behind it,
and the stalls ``lossguard.analysis.analyze`` names (onset-end, the tests that decided). The counts
at the end: plateau runs named / plateau runs; other runs named (false alarms against the truth).

    python benchmarks/stall_natural.py benchmarks/results/natural_logs_harsh [more folders] [--markdown]
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

from lossguard import metrics as M
from lossguard.analysis import analyze
from lossguard.classify.incident import IncidentKind as K
from lossguard.io import read_log

NAME = re.compile(r"(?P<config>.+)_lr(?P<lr>[0-9.e-]+)_s(?P<seed>\d+)\.jsonl$")


def _series(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    log = read_log(path)
    s, x = log.live(M.LOSS)
    ls, lv = log.live(M.LR)
    return s, x, np.interp(s, ls, lv)


def _level(s: np.ndarray, x: np.ndarray, a: float, b: float) -> float:
    return float(np.median(x[(s >= a) & (s <= b)]))


def peak_phase(s: np.ndarray, lr: np.ndarray) -> tuple[float, float]:
    """First step at the peak LR and last step with the LR at >= 50% of it."""
    top = float(np.max(lr))
    return float(s[np.argmax(lr >= 0.999 * top)]), float(s[np.flatnonzero(lr >= 0.5 * top)[-1]])


def verdict(run: Path, best: Path) -> tuple[bool, dict]:
    """The ground truth for ``run`` against the best-LR run ``best`` (see the module docstring)."""
    s, x, lr = _series(run)
    a, b = peak_phase(s, lr)
    w = max(3.0, (b - a) / 10)
    bs, bx, _ = _series(best)
    start, end = _level(s, x, a, a + w), _level(s, x, b - w, b)
    b_start, b_end = _level(bs, bx, a, a + w), _level(bs, bx, b - w, b)
    fall, b_fall = start - end, b_start - b_end
    stuck = fall < b_fall / 3 and end >= 1.1 * b_end
    return stuck, {"phase": f"{a:.0f}-{b:.0f}", "start": start, "end": end, "fall": fall, "best_fall": b_fall,
                   "best_end": b_end}


def _final(path: Path) -> float:
    """Median loss over the last 10% of a log (the best LR has the lowest)."""
    x = _series(path)[1]
    return float(np.median(x[-max(3, len(x) // 10):]))


def named(path: Path) -> list[str]:
    """The stalls ``analyze`` names, as ``onset-end (tests)``."""
    out = []
    for inc in analyze(read_log(path)).incidents:
        if inc.kind is K.STALL:
            out.append(f"{inc.onset}-{inc.peak} ({', '.join(inc.details['tests'])})")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--best-lr", default=None, help="the best LR (default: per seed and config, lowest final loss)")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    hit = miss = fa = clean = 0
    if a.markdown:
        print("| log | P (steps) | loss over P | best LR over P | fall / best's | plateau at peak LR | analyze names |")
        print("|---|---|---|---|---|---|---|")
    for folder in map(Path, a.folders):
        runs = {}
        for p in sorted(folder.glob("*.jsonl")):
            m = NAME.match(p.name)
            if m:
                runs[(m["config"], m["seed"], m["lr"])] = p
        for (config, seed, _lr), p in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1], float(kv[0][2]))):
            group = {k[2]: v for k, v in runs.items() if k[:2] == (config, seed)}
            if a.best_lr is not None:
                best = group.get(a.best_lr)
            else:
                best = min(group.values(), key=_final)
            if best is None:
                continue
            stuck, info = verdict(p, best)
            found = named(p)
            hit += stuck and bool(found)
            miss += stuck and not found
            fa += (not stuck) and bool(found)
            clean += (not stuck) and not found
            label = f"{folder.name}/{p.name}"
            ratio, names = info["fall"] / info["best_fall"], "; ".join(found) or "-"
            if a.markdown:
                print(f"| {label} | {info['phase']} | {info['start']:.3f} -> {info['end']:.3f} | "
                      f"{info['best_end'] + info['best_fall']:.3f} -> {info['best_end']:.3f} | "
                      f"{ratio:.2f} | {'**yes**' if stuck else 'no'} | {names} |")
            else:
                print(f"{label:55s} {'PLATEAU' if stuck else '-':8s} P {info['phase']:>8s} "
                      f"{info['start']:.3f}->{info['end']:.3f} (best {info['best_end'] + info['best_fall']:.3f}->"
                      f"{info['best_end']:.3f}, ratio {ratio:.2f})  named: {names}")
    print(f"\nplateau runs named: {hit}/{hit + miss}; other runs named (false alarms): {fa}/{fa + clean}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
