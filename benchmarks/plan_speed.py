"""How long does planning take for a log with many incidents? (issue 19: ``plan_for`` was cubic.)

Builds ``--incidents`` incidents of mixed kinds (a long, troubled run) and, for the current plans,
the guard's decision records of a replay (a few skips per incident, a rollback and its LR cut every
third one), then times :func:`lossguard.plan.make_plans` (best of ``--repeat``). Planning files each
decision under its incident with one binary search: linear in incidents and decisions.
Run it against an older ``src`` (``PYTHONPATH=old/src``) to compare; an older ``make_plans``
took incidents only.

    python benchmarks/plan_speed.py --incidents 400
"""
from __future__ import annotations

import argparse
import inspect
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--incidents", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)

    from lossguard.classify.incident import Incident, IncidentKind as K
    from lossguard.plan import make_plans

    kinds = [K.SPIKE_FAST, K.SPIKE_SLOW, K.NON_FINITE, K.DIVERGENCE, K.LEVEL_SHIFT, K.GRAD_NORM_SPIKE]
    incs = [Incident(kinds[i % len(kinds)], "loss", 1000 + 300 * i, 1002 + 300 * i, 1010 + 300 * i,
                     2.0, 3.0, 1.0, 10.0) for i in range(a.incidents)]
    decisions = []
    for i, inc in enumerate(incs):
        decisions += [{"step": inc.onset + k, "event": "skip", "reasons": ["loss outlier"]} for k in range(3)]
        if i % 3 == 0:
            decisions.append({"step": inc.onset + 2, "event": "rollback", "onset": inc.onset, "to_step": inc.onset - 100,
                              "skip_batches": [inc.onset, inc.onset + 203], "reasons": ["3 bad steps"]})
            decisions.append({"step": inc.onset - 100, "event": "lr_cut", "factor": 0.5, "reasons": ["cut"]})
    new_api = "decisions" in inspect.signature(make_plans).parameters
    best = float("inf")
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        plans = make_plans(incs, decisions) if new_api else make_plans(incs)
        best = min(best, time.perf_counter() - t0)
    print(f"make_plans: {a.incidents} incidents, {len(decisions) if new_api else 0} decisions -> {len(plans)} plans "
          f"in {1000 * best:.1f} ms (best of {a.repeat})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
