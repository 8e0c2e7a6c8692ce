"""The guard's defaults over curves it was never tuned on: what would it do on the analyser's generator?

``lossguard simulate`` (the guard's judge and policy, replayed) with the default ``GuardConfig`` on
runs of every curve family of :mod:`evals.curves` -- TUNE and TEST, including the TEST-only
Student-t and AR(1) noise and the cosine-with-restarts schedule -- written to their log formats and
read back. The guard was calibrated on the model zoo, never on these curves, so this is an outside
check of its false interventions:

- on **clean** runs: any rollback, LR cut or halt is a false intervention (skips are counted too);
- per **event kind**: how often the guard would roll back, cut the LR or halt (a level shift or a
  resume spike is not a fault the guard should fight; a NaN or a divergence is).

The simulated decisions after the first one that changes the future are counterfactual (the log
goes on as if the guard had not acted); they are counted as decisions all the same.

    python benchmarks/simulate_families.py --runs 28
    python benchmarks/simulate_families.py --runs 28 --config guard.toml   # another configuration
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root: evals/, the lab


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=28, help="runs per family (the kinds cycle over them)")
    ap.add_argument("--config", help="guard configuration (TOML); default: GuardConfig()")
    a = ap.parse_args(argv)

    from lossguard.guard import GuardConfig
    from lossguard.guard.config_file import load_config
    from lossguard.simulate import simulate
    from evals.curves import families, run_family

    cfg = load_config(a.config) if a.config else GuardConfig()
    from lossguard.errors import LossguardError

    def guard_on(log):
        try:
            return simulate(log, cfg)
        except LossguardError:
            return None  # a multi-stream log (loss/code, loss/web) has no single loss to guard
    t0 = time.perf_counter()
    for split in ("tune", "test"):
        per_kind: dict[str, Counter] = defaultdict(Counter)
        evidence: Counter = Counter()
        for fam in families(split):
            for _, run, sim in run_family(fam, a.runs, guard_on):
                kind = run.kind.value if run.kind is not None else "clean"
                c = per_kind[kind]
                if sim is None:
                    c["no_loss"] += 1
                    continue
                c["runs"] += 1
                acts = [d["event"] for d in sim.decisions]
                c["skips"] += acts.count("skip")
                intervened = any(e in ("rollback", "lr_cut", "halt") for e in acts)
                c["with_intervention"] += intervened
                c["rollbacks"] += acts.count("rollback")
                c["lr_cuts"] += acts.count("lr_cut")
                c["halts"] += acts.count("halt")
                for d in sim.decisions:
                    if d["event"] == "skip":
                        text = " ".join(d.get("reasons", []))
                        named = re.findall(r"\(([^()]*test)\)", text)
                        evidence[named[0] if named else ("non-finite" if "non-finite" in text else
                                                         "loss outlier" if "loss outlier" in text else "other")] += 1
        print(f"\n== {split.upper()} families ({', '.join(f.name for f in families(split))}), {a.runs} runs each ==")
        print(f"{'kind':<22}{'runs':>6}{'no loss':>8}{'w/ rollback/cut/halt':>22}{'rollbacks':>11}{'LR cuts':>9}{'halts':>7}{'skips':>7}")
        for kind in ["clean"] + sorted(k for k in per_kind if k != "clean"):
            c = per_kind.get(kind)
            if c:
                print(f"{kind:<22}{c['runs']:>6}{c['no_loss']:>8}{c['with_intervention']:>22}{c['rollbacks']:>11}{c['lr_cuts']:>9}"
                      f"{c['halts']:>7}{c['skips']:>7}")
        print("skips by the test named first in their reasons: " + "; ".join(f"{k}: {n}" for k, n in evidence.most_common()))
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
