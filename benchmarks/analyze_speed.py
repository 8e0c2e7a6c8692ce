"""Speed of the whole analysis of a 1,000,000-step run (loss + grad norm), after reading.

Builds the RunLog in memory (reading is helper A's benchmark), then times ``analyze()`` (all
detectors, classification, plans), best of ``--repeat`` runs. In the same run, for comparison:

* ``pandas rolling``: a plain trailing rolling median + rolling MAD z-score on both series
  (``Series.rolling(128).median()`` twice per series) - the obvious way to write it, and only the
  statistic, no episodes/classification/plans;
* ``online loop``: the guard's path, :class:`OnlineSeriesDetector.update` once per point, timed on
  the first ``--online-points`` points of both series and scaled linearly to 1M (stated as such).

    .venv/bin/python benchmarks/analyze_speed.py            # 1M steps
    .venv/bin/python benchmarks/analyze_speed.py --steps 100000 --repeat 1
    for i in 1 2 3 4 5; do for t in A B; do PYTHONPATH=$t/src nice -n 10 .venv/bin/python \
        benchmarks/analyze_speed.py --once; done; done             # two trees A, B interleaved
"""
from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np


def make_log(n: int, seed: int = 0):
    from lossguard.runlog import RunLogBuilder

    rng = np.random.default_rng(seed)
    t = np.arange(1, n + 1)
    loss = 2 + 9 * (t + 50.0) ** -0.35 * (1 + rng.normal(0, 0.01, n))
    for i in rng.integers(n // 10, n - 100, 20):      # twenty spikes of 1.3-3x, decaying
        loss[i:i + 60] *= 1 + rng.uniform(0.3, 2.0) * np.exp(-np.arange(len(loss[i:i + 60])) / 10.0)
    gn = 0.3 * (1 + 3 * np.exp(-t / 3000.0)) * np.exp(rng.normal(0, 0.15, n))
    b = RunLogBuilder("bench")
    b.start_segment("mem://bench")
    b.add("loss", t, loss)
    b.add("grad_norm", t, gn)
    return b.build()


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--online-points", type=int, default=50_000)
    ap.add_argument("--once", action="store_true",
                    help="print only the seconds of one analyze() (imports warmed on a 20k-step log): for "
                         "A/B runs of two trees, alternated in a shell loop with PYTHONPATH=<tree>/src")
    args = ap.parse_args()

    from lossguard.analysis import analyze
    from lossguard.detect.series import OnlineSeriesDetector
    from lossguard.stitch import stitch

    if args.once:
        analyze(stitch(make_log(20_000)))
        log = stitch(make_log(args.steps))
        t0 = time.perf_counter()
        analyze(log)
        print(f"{time.perf_counter() - t0:.3f}")
        return
    log = stitch(make_log(args.steps))
    analyze(log)  # warm-up (imports, first allocations)
    t_analyze = best(lambda: analyze(log), args.repeat)
    a = analyze(log)

    rows = [("lossguard analyze() (all detectors + classify + plan)", t_analyze)]
    try:
        import pandas as pd

        def rolling():
            for name in ("loss", "grad_norm"):
                s = pd.Series(log.series[name].values)
                med = s.rolling(128).median().shift(1)
                mad = (s - med).abs().rolling(128).median().shift(1)
                _ = ((s - med) / (1.4826 * mad)) > 7
        rows.append(("pandas rolling median/MAD z-score (statistic only)", best(rolling, args.repeat)))
    except ImportError:
        pass

    m = min(args.online_points, args.steps)

    def online():
        for name in ("loss", "grad_norm"):
            d = OnlineSeriesDetector()
            s, v = log.series[name].steps[:m], log.series[name].values[:m]
            for step, value in zip(s.tolist(), v.tolist(), strict=True):
                d.update(step, value)
            d.finish()
    t_online = best(online, 1) * args.steps / m
    rows.append((f"online loop, OnlineSeriesDetector.update per point (timed on {m:,}, scaled)", t_online))

    print(f"analysis of {args.steps:,} steps (loss + grad norm), after reading; best of {args.repeat}")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"numpy {np.__version__}, python {platform.python_version()}")
    print(f"incidents found: {len(a.incidents)} ({', '.join(sorted({i.kind.value for i in a.incidents}))})\n")
    print("| method | seconds | vs analyze() |")
    print("|---|---:|---:|")
    for name, sec in rows:
        print(f"| {name} | {sec:.3f} | {sec / t_analyze:.2f}x |")
    print(f"\ngoal: < 1 s -> {'met' if t_analyze < 1.0 else 'MISSED'} ({t_analyze:.3f} s)")


if __name__ == "__main__":
    main()
