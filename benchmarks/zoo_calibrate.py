"""How heavy are the tails of healthy runs? The numbers the guard's calibrated tests are set from.

Runs the healthy grid of the TUNED zoo families only (mlp, cnn, gpt, encoder; the held-out lstm and
hf_gpt2 are never looked at here), unguarded, recording each step's training loss and gradient
norm, and prints, over all runs and steps after the first ``--skip`` steps:

- how often the analyser's outlier test (defaults) flags the loss, and the gradient norm;
- the distribution of ``grad_norm / q(grad_norm over the trailing window)`` for the tail quantile
  ``--q`` (the "own recent tail" a healthy excursion is measured against): quantiles and max;
- the same ratio for the loss, and how large the loss z is on steps whose gradient norm is flagged;
- during the first 5 steps (before the outlier test has a baseline): the largest grad-norm and loss
  ratios to the first step's, and the grad norm relative to the parameter norm at step 0;
- the loss-shift test's statistic: the most steps of any ``shift_window`` (16) in a row whose loss z
  is at least 1.5 / 2.0 / 3.0 (the test fires at half the window), per run: with
  ``--scenario bad_pocket`` the same for the pocket runs, and the first step it would fire.

    python benchmarks/zoo_calibrate.py --jobs 2
"""
from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root: evals/, the lab

import numpy as np

SHIFT_Z_ON = 2.0
"""The loss-shift test's threshold when it is turned on (``EvidenceConfig(shift_z=2.0)``)."""


def one(spec_dict):
    import torch

    torch.set_num_threads(1)
    from evals.zoo import FAMILIES, Outcome, run

    spec = Outcome.from_dict({"spec": spec_dict}).spec
    out = run(spec, record=True)
    fam = FAMILIES[spec.family]
    torch.manual_seed(spec.seed)
    pn = float(torch.linalg.vector_norm(torch.stack([p.detach().norm() for p in fam.model().parameters()])))
    return spec.family, out.series, pn


def trailing_quantile(x: np.ndarray, window: int, q: float) -> np.ndarray:
    """q-quantile of x[i-window:i] for every i >= window (NaN before)."""
    out = np.full(len(x), np.nan)
    if len(x) > window:
        w = np.lib.stride_tricks.sliding_window_view(x, window)[:-1]
        out[window:] = np.quantile(w, q, axis=1)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--q", type=float, default=0.9, help="tail quantile of the trailing window")
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--scenario", default="healthy", help="record this scenario's unguarded runs instead")
    a = ap.parse_args(argv)
    sys.path.insert(0, "benchmarks")
    from zoo import _spec_dict, grid

    from lossguard.detect.outlier import score
    from evals.zoo import FAMILIES

    tuned = [n for n, f in FAMILIES.items() if f.tuned]
    specs = [s for s in grid(tuned, [a.scenario]) if not s.guarded and not s.oracle and s.scenario.value == a.scenario]
    with ProcessPoolExecutor(a.jobs) as ex:
        results = list(ex.map(one, [_spec_dict(s) for s in specs]))
    from lossguard.guard.judge.evidence import EvidenceConfig

    window = EvidenceConfig().shift_window  # the loss-shift test is opt-in; SHIFT_Z_ON is its documented value
    shift_max: dict[float, list] = {1.5: [], 2.0: [], 3.0: []}
    shift_first: list = []
    ratios, lratios, lz_at_gn, nflag_l, nflag_g, n = [], [], [], 0, 0, 0
    cold_g, cold_l, g0_over_p = [], [], []
    per_family, rises = {}, {}
    for fam, series, pn in results:
        loss, gn = np.asarray(series["loss"]), np.asarray(series["grad_norm"])
        ls, gs = score(loss), score(gn)
        nflag_l += int(ls.outlier.sum())
        nflag_g += int(gs.outlier.sum())
        n += len(loss)
        r = gn / trailing_quantile(gn, a.window, a.q)
        rl = loss / trailing_quantile(loss, a.window, a.q)
        ratios.append(r[a.window:])
        lratios.append(rl[a.window:])
        per_family.setdefault(fam, []).append(np.nanmax(r))
        lz_at_gn += list(ls.z[gs.outlier])
        base = ls.baseline[a.window:]
        best = np.fmin.accumulate(base)
        rises.setdefault(fam, []).append(float(np.nanmax(base / best - 1.0)) if len(base) else 0.0)
        for thr, out in shift_max.items():
            with np.errstate(invalid="ignore"):
                up = (ls.z >= thr).astype(int)
            count = np.convolve(up, np.ones(window, dtype=int))[:len(up)]
            out.append(int(count.max()))
            if thr == SHIFT_Z_ON:
                fire = np.flatnonzero(2 * count >= window)
                shift_first.append(int(fire[0]) if len(fire) else None)
        cold_g.append(np.max(gn[:5] / gn[0]))
        cold_l.append(np.max(loss[:5] / loss[0]))
        g0_over_p.append(gn[0] / pn)
    r, rl = np.concatenate(ratios), np.concatenate(lratios)
    print(f"{len(results)} healthy runs of {', '.join(tuned)}; {n} steps")
    print(f"analyser test flags: loss {nflag_l} steps ({100 * nflag_l / n:.2f}%), grad norm {nflag_g} ({100 * nflag_g / n:.2f}%)")
    qs = [0.5, 0.99, 0.999, 1.0]
    print(f"grad_norm / q{a.q:g}(trailing {a.window}): " + ", ".join(f"q{q:g}={np.nanquantile(r, q):.2f}" for q in qs))
    print("  max per family: " + ", ".join(f"{f} {max(v):.2f}" for f, v in per_family.items()))
    print(f"loss / q{a.q:g}(trailing {a.window}): " + ", ".join(f"q{q:g}={np.nanquantile(rl, q):.2f}" for q in qs))
    lz = np.asarray(lz_at_gn, dtype=float)
    if len(lz):
        print(f"loss z on grad-norm-flagged steps ({len(lz)}): " + ", ".join(
            f"q{q:g}={np.nanquantile(lz, q):.2f}" for q in qs))
    print("loss baseline (trailing median) above its running minimum, max per run: " + "; ".join(
        f"{f} max {max(v):.3f} median {np.median(v):.3f}" for f, v in rises.items()))
    print(f"first 5 steps: max grad_norm/first {max(cold_g):.2f}, max loss/first {max(cold_l):.2f}; "
          f"grad_norm(step 0)/param_norm max {max(g0_over_p):.3g}")
    print(f"loss-shift statistic (most of {window} steps in a row with loss z >= thr; fires at {window // 2}): " + "; ".join(
        f"z>={thr:g}: max {max(v)}, runs reaching {window // 2}: {sum(x >= window // 2 for x in v)}/{len(v)}"
        for thr, v in shift_max.items()))
    print(f"first step the loss-shift test (shift_z={SHIFT_Z_ON:g}) fires, per run: {shift_first}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
