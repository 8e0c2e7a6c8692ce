"""A second, independent generator of training-loss runs with ground truth, and the tune/test protocol.

Built without looking at the analyser's internals, with different curves (power law in LR area,
five LR schedules), noise (Gaussian, Student-t, AR(1), multiplicative, bursty), logging (every 1-100
steps, 30 points to 1M steps) and file formats from :mod:`evals.synthetic`. Runs are
grouped into curve families split once into TUNE and TEST (:mod:`.families`); tune on TUNE only.

Typical use::

    from evals.curves import families, family_runs
    for fam in families("tune"):
        for run in family_runs(fam, 28):
            ...  # run.metrics, run.truth; write_log(run, "csv", dir) to get a file
"""
from evals.curves.families import FAMILIES, Family, Split, families, family
from evals.curves.generator import generate
from evals.curves.matching import Claim, RunScore, Tally, claims, score
from evals.curves.noise import NoiseModel
from evals.curves.protocol import KIND_CYCLE, family_runs, format_for, read_back, run_family, seed_for
from evals.curves.schedules import Schedule
from evals.curves.truth import CurveRun, EventKind, TruthEvent
from evals.curves.writers import LogFormat, formats_for, write_log

__all__ = ["FAMILIES", "Family", "Split", "families", "family", "generate", "Claim", "RunScore", "Tally",
           "claims", "score", "NoiseModel", "KIND_CYCLE", "family_runs", "format_for", "read_back",
           "run_family", "seed_for", "Schedule", "CurveRun", "EventKind", "TruthEvent", "LogFormat",
           "formats_for", "write_log"]
