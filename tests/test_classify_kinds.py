"""Every kind is found and named on generated runs with known events (seeds below 10,000 only)."""
from __future__ import annotations

import pytest

from lossguard.analysis import analyze
from lossguard.classify.incident import IncidentKind as K
from evals.scoring import score_run, SuiteScore
from evals.synthetic import generate_run, generate_suite


@pytest.fixture(scope="module")
def suite_score() -> SuiteScore:
    runs = generate_suite(48, seed=7)
    score = SuiteScore()
    for run in runs:
        score_run(run, analyze(run.log).incidents, into=score)
    return score


def test_spike_umbrella_and_clean_runs(suite_score):
    assert suite_score.spike.f1 >= 0.9, suite_score.spike
    assert suite_score.clean_runs and suite_score.clean_runs_with_alarm == 0


def test_every_kind_is_found(suite_score):
    for kind in K:
        c = suite_score.per_kind[kind]
        if c.tp + c.fn >= 2:
            assert c.recall >= 0.6, (kind, c)
        assert c.fp <= 2, (kind, c)


@pytest.mark.parametrize("kind, seed", [(K.SPIKE_FAST, 11), (K.SPIKE_SLOW, 12), (K.LEVEL_SHIFT, 13),
                                        (K.RESUME_SPIKE, 14), (K.REPEATED_DATA, 15), (K.STREAM_SPIKE, 16),
                                        (K.NON_FINITE, 17), (K.LOSS_SCALE_COLLAPSE, 18), (K.GRAD_NORM_SPIKE, 19),
                                        (K.SUDDEN_DROP, 20)])
def test_single_kind_run_names_it_at_its_onset(kind, seed):
    run = generate_run(kind, seed=seed, length=8000, log_every=1, nuisances=False)
    (truth,) = [e for e in run.events if e.kind == kind]
    found = [i for i in analyze(run.log).incidents if i.kind == kind]
    assert found, f"{kind.value} not found; truth onset {truth.onset}"
    assert min(abs(i.onset - truth.onset) for i in found) <= 80
    # every incident carries its evidence in words
    assert all(i.evidence for i in found)
