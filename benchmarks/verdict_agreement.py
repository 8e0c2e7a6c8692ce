"""One verdict: do ``analyze``, ``simulate`` and a live guard take the same first heavy action?

Per-step generated logs of every kind (:func:`evals.synthetic.generate_run`, logged every
step, ``--length`` steps, numbered from 0 as the guard numbers its steps), ``--seeds`` per kind plus
clean runs. For each log:

- ``analyze``: the earliest plan that asks for a rollback, LR cut or halt;
- ``simulate``: the first such decision, as the command line runs it (with the analyser's whole-log
  findings: ``recovery/finding.py``);
- ``live``: a real StabilityGuard training a one-parameter model whose loss and grad norm are the
  logged ones (``evals.agreement.from_live_guard``; skipped with ``--no-live``).

Two runs agree when both take no heavy action, or the same action at the same step with the same
reasons, rollback target and skipped batches. Every disagreement is listed with the rule that
separates it. ``--before`` measures a lossguard whose plans carry no decisions (main before issue
19): there a plan agrees with simulate when it names the same action for an incident whose onset is
within 20 steps of the decision's episode onset.

    python benchmarks/verdict_agreement.py --seeds 10            # 130 runs, about 4 minutes
    python benchmarks/verdict_agreement.py --seeds 10 --no-live  # analyze vs simulate only
    python benchmarks/verdict_agreement.py --seeds 0 --no-live --families 28  # the TEST curve families
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root: evals/, the lab

HEAVY = ("rollback", "lr_cut", "halt")


def _before_heavy(analysis):
    """Main before issue 19: (action, incident onset) of the earliest heavy plan."""
    best = None
    for p in analysis.plans:
        a = getattr(p.action, "value", p.action)
        if a in HEAVY:
            onset = analysis.incidents[p.incident].onset
            if best is None or onset < best[1]:
                best = (a, onset)
    return best


def separating_rule(h_s, found) -> str | None:
    """The documented rule that separates simulate's first heavy action from a live guard's: the
    whole-log finding it answers, when a live guard cannot see it (:meth:`WholeLogFinding.unseen_live`)."""
    if h_s is None:
        return None
    return next((f.unseen_live() for f in found if f.step == h_s.step and f.unseen_live()), None)


def _families(n: int, cfg, per_kind, rest, live: bool) -> None:
    """analyze vs simulate on the TEST curve families (evals.curves); with ``live``, the live guard too
    on the runs logged every step (the others are counted under ``live n/a``)."""
    from lossguard.analysis import analyze
    from lossguard.errors import LossguardError
    from lossguard.plan import findings
    from lossguard.simulate import simulate
    from evals.agreement import compare, from_analysis, from_live_guard, from_simulation, shifted

    from evals.curves import families, run_family

    def three(log):
        # Numbered from 0 as the guard numbers its steps (the families count from 1), so the three
        # name the same steps: the reasons quote step numbers.
        log = shifted(log, int(min(s.steps.min() for s in log.series.values())))
        try:
            an = analyze(log)
            h_s = from_simulation(simulate(log, cfg, findings=findings(an.incidents)))
        except LossguardError:
            return None  # a multi-stream log has no single loss to guard
        h_l, ran = None, False
        if live:
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    h_l, ran = from_live_guard(log, cfg, tmp), True
                except ValueError:
                    pass  # not logged every step: no live replay
        return from_analysis(an), h_s, h_l, ran, findings(an.incidents)
    for fam in families("test"):
        for i, run, got in run_family(fam, n, three):
            if got is None:
                continue
            h_a, h_s, h_l, ran, found = got
            c = per_kind[f"curves:{fam.name}"]
            c["runs"] += 1
            d = compare(h_a, h_s)
            c["analyze=simulate"] += d is None
            if d:
                rest.append(f"{fam.name} run {i} ({run.kind}): analyze vs simulate: {d}")
            if not ran:
                c["live n/a"] += live
                continue
            d_sl = compare(h_s, h_l, scaler=False)  # the live replay has no GradScaler
            c["simulate=live"] += d_sl is None
            c["all three"] += d is None and d_sl is None
            if d_sl:
                rule = separating_rule(h_s, found)
                c["separated by rule"] += rule is not None
                rest.append(f"{fam.name} run {i} ({run.kind}): simulate vs live: {d_sl} -- {rule or 'NO RULE'}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10, help="runs per kind (and clean runs)")
    ap.add_argument("--length", type=int, default=2000, help="steps per run")
    ap.add_argument("--seed-base", type=int, default=1000,
                    help="first seed (1000: the seeds the team looked at; another base gives unseen runs)")
    ap.add_argument("--no-live", action="store_true", help="skip the live guard (no torch needed)")
    ap.add_argument("--before", action="store_true", help="measure plans without decisions (see the docstring)")
    ap.add_argument("--families", type=int, default=0,
                    help="also this many runs of each TEST curve family (never tuned on; any logging interval, "
                         "written to their formats and read back): analyze vs simulate")
    a = ap.parse_args(argv)

    from lossguard.analysis import analyze
    from lossguard.guard.config import GuardConfig
    from lossguard.simulate import simulate
    from evals.synthetic import GENERATED_KINDS, generate_run

    cfg = GuardConfig()
    kinds = [None, *GENERATED_KINDS]
    per_kind: dict[str, Counter] = defaultdict(Counter)
    rest: list[str] = []
    t0 = time.perf_counter()
    for kind in kinds:
        name = kind.value if kind is not None else "clean"
        for seed in range(a.seeds):
            run = generate_run(kind, seed=a.seed_base + seed, length=a.length, log_every=1)
            if a.before:
                log = run.log
                an = analyze(log)
                sim = simulate(log, cfg)
                s = next(((d["event"], d.get("onset", d["step"])) for d in sim.decisions if d["event"] in HEAVY), None)
                b = _before_heavy(an)
                ok = (s is None and b is None) or (s is not None and b is not None and s[0] == b[0]
                                                   and abs(s[1] - b[1]) <= 20)
                per_kind[name]["runs"] += 1
                per_kind[name]["analyze=simulate"] += ok
                continue
            from lossguard.plan import findings
            from evals.agreement import compare, from_analysis, from_live_guard, from_simulation, shifted

            log = shifted(run.log, int(min(s.steps.min() for s in run.log.series.values())))
            an = analyze(log)
            h_a = from_analysis(an)
            h_s = from_simulation(simulate(log, cfg, findings=findings(an.incidents)))
            c = per_kind[name]
            c["runs"] += 1
            d_as = compare(h_a, h_s)
            c["analyze=simulate"] += d_as is None
            if d_as:
                rest.append(f"{name} seed {seed}: analyze vs simulate: {d_as}")
            if a.no_live:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                h_l = from_live_guard(log, cfg, tmp)
            d_sl = compare(h_s, h_l, scaler=False)  # the live replay has no GradScaler
            c["simulate=live"] += d_sl is None
            c["all three"] += d_as is None and d_sl is None
            if d_sl:
                rule = separating_rule(h_s, findings(an.incidents))
                c["separated by rule"] += rule is not None
                rule = f"whole-log finding not seen live (recovery/finding.py): {rule}" if rule else "NO RULE"
                rest.append(f"{name} seed {seed}: simulate {h_s and (h_s.action, h_s.step)} vs live "
                            f"{h_l and (h_l.action, h_l.step)}: {d_sl} -- {rule}")
    if a.families and not a.before:
        _families(a.families, cfg, per_kind, rest, live=not a.no_live)
    cols = ["runs", "analyze=simulate"] + ([] if a.no_live or a.before else
                                           ["simulate=live", "all three", "separated by rule", "live n/a"])
    print(f"{'kind':<22}" + "".join(f"{c:>18}" for c in cols))
    total: Counter = Counter()
    for name, c in per_kind.items():
        total.update(c)
        print(f"{name:<22}" + "".join(f"{c[k]:>18}" for k in cols))
    print(f"{'TOTAL':<22}" + "".join(f"{total[k]:>18}" for k in cols))
    for k in cols[1:]:
        if k == "live n/a":
            continue
        n = total["runs"] - (total["live n/a"] if k != "analyze=simulate" else 0)  # live: per-step runs only
        print(f"{k}: {total[k]}/{n} = {100 * total[k] / max(n, 1):.1f}%")
    if rest:
        print("\nDisagreements:")
        print("\n".join(f"  - {r}" for r in rest))
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
