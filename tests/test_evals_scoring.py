"""Matching rules of the scorer on hand-made cases with known answers."""
from __future__ import annotations

import pytest

from lossguard.classify.incident import Incident, IncidentKind as K
from lossguard.runlog import RunLogBuilder
from evals.scoring import Counts, Detection, as_detections, margin_steps, score_run, score_runs
from evals.synthetic import SyntheticRun, TrueEvent, generate_run

SPAN, EVERY = 10_000, 1          # margin = max(10 points, 1% of 10,000 steps) = 100 steps


def _run(*events: TrueEvent) -> SyntheticRun:
    b = RunLogBuilder("synthetic")
    b.start_segment("x.jsonl")
    b.add("loss", range(1, SPAN + 1), [1.0] * SPAN)
    return SyntheticRun(log=b.build(), truth=list(events), params={"length": SPAN, "log_every": EVERY}, seed=0)


def ev(kind: K, onset: int, *, ignore: bool = False, peak: int | None = None) -> TrueEvent:
    return TrueEvent(kind, "loss", onset, onset if peak is None else peak, None, ignore=ignore)


def test_margin_is_ten_points_or_one_percent():
    assert margin_steps(10_000, 1) == 100
    assert margin_steps(1_000, 10) == 100
    assert margin_steps(50_000, 5) == 500


def test_exact_hit_miss_and_false_alarm():
    run = _run(ev(K.SPIKE_FAST, 5000), ev(K.DIVERGENCE, 8000))
    s = score_run(run, [(K.SPIKE_FAST, 5030), (K.SPIKE_FAST, 2000)])
    fast, div = s.per_kind[K.SPIKE_FAST], s.per_kind[K.DIVERGENCE]
    assert (fast.tp, fast.fp, fast.fn) == (1, 1, 0)
    assert (div.tp, div.fp, div.fn) == (0, 0, 1)
    assert fast.delays == [30]
    assert fast.precision == 0.5 and fast.recall == 1.0 and fast.f1 == pytest.approx(2 / 3)
    assert div.f1 == 0.0 and div.precision is None
    assert s.per_kind[K.LEVEL_SHIFT].f1 is None        # nothing to find, nothing claimed


def test_margin_edges():
    run = _run(ev(K.SPIKE_FAST, 5000))
    assert score_run(run, [(K.SPIKE_FAST, 4900)]).per_kind[K.SPIKE_FAST].tp == 1
    assert score_run(run, [(K.SPIKE_FAST, 5100)]).per_kind[K.SPIKE_FAST].tp == 1
    s = score_run(run, [(K.SPIKE_FAST, 5101)])
    assert (s.per_kind[K.SPIKE_FAST].tp, s.per_kind[K.SPIKE_FAST].fp) == (0, 1)


def test_wrong_kind_is_strict_miss_plus_false_alarm_but_an_umbrella_hit():
    run = _run(ev(K.SPIKE_SLOW, 5000))
    s = score_run(run, [(K.SPIKE_FAST, 5002)])
    assert (s.per_kind[K.SPIKE_SLOW].fn, s.per_kind[K.SPIKE_FAST].fp) == (1, 1)
    assert (s.spike.tp, s.spike.fp, s.spike.fn) == (1, 0, 0)
    assert s.found_by_kind[K.SPIKE_SLOW] == [1, 1]
    # a non-spike wrong kind is not rescued by the umbrella
    run = _run(ev(K.LEVEL_SHIFT, 5000))
    s = score_run(run, [(K.DIVERGENCE, 5000)])
    assert s.found_by_kind[K.LEVEL_SHIFT] == [0, 1] and s.per_kind[K.DIVERGENCE].fp == 1


def test_double_detection_counts_once_closest_first():
    run = _run(ev(K.SPIKE_FAST, 5000))
    s = score_run(run, [(K.SPIKE_FAST, 5050), (K.SPIKE_FAST, 5010)])
    c = s.per_kind[K.SPIKE_FAST]
    assert (c.tp, c.fp) == (1, 1) and c.delays == [10]


def test_one_detection_cannot_take_two_events():
    run = _run(ev(K.SPIKE_FAST, 5000), ev(K.SPIKE_FAST, 5060))
    c = score_run(run, [(K.SPIKE_FAST, 5030)]).per_kind[K.SPIKE_FAST]
    assert (c.tp, c.fn, c.fp) == (1, 1, 0)


def test_ignored_events_are_neither_hits_nor_misses():
    run = _run(ev(K.SPIKE_FAST, 3000, ignore=True), ev(K.GRAD_NORM_SPIKE, 7000, ignore=True))
    s = score_run(run, [(K.SPIKE_SLOW, 3001), (K.GRAD_NORM_SPIKE, 7000)])
    assert s.overall().tp == s.overall().fp == s.overall().fn == 0
    assert s.clean_runs == 1 and s.clean_runs_with_alarm == 0
    # a loss-spike claim on a grad-norm don't-care is still a false alarm
    s = score_run(run, [(K.SPIKE_FAST, 7000)])
    assert s.per_kind[K.SPIKE_FAST].fp == 1 and s.clean_runs_with_alarm == 1


def test_divergence_slack_and_run_level_claims():
    run = _run(ev(K.DIVERGENCE, 5000))
    assert score_run(run, [(K.DIVERGENCE, 5590)]).per_kind[K.DIVERGENCE].tp == 1   # 100 + 5% of 10,000
    assert score_run(run, [(K.DIVERGENCE, 5610)]).per_kind[K.DIVERGENCE].tp == 0
    c = score_run(run, [(K.DIVERGENCE, None)]).per_kind[K.DIVERGENCE]
    assert (c.tp, c.fp, c.delays) == (1, 0, [])
    gradual = TrueEvent(K.DIVERGENCE, "loss", 5000, 9000, None, window=(4000, 7000))
    assert score_run(_run(gradual), [(K.DIVERGENCE, 3900)]).per_kind[K.DIVERGENCE].tp == 1
    assert score_run(_run(gradual), [(K.DIVERGENCE, 7100)]).per_kind[K.DIVERGENCE].tp == 1
    assert score_run(_run(gradual), [(K.DIVERGENCE, 7101)]).per_kind[K.DIVERGENCE].tp == 0
    assert score_run(_run(gradual), [(K.DIVERGENCE, 3899)]).per_kind[K.DIVERGENCE].tp == 0
    collapse = TrueEvent(K.LOSS_SCALE_COLLAPSE, "loss_scale", 5000, 5400, None)
    assert score_run(_run(collapse), [(K.LOSS_SCALE_COLLAPSE, 5450)]).per_kind[K.LOSS_SCALE_COLLAPSE].tp == 1


def test_detections_from_incidents_and_tuples():
    inc = Incident(kind=K.SPIKE_FAST, metric="loss", onset=12, peak=13, end=20, baseline=1.0,
                   peak_value=2.0, magnitude=1.0, magnitude_sigma=10.0)
    assert as_detections([inc, ("divergence", None), Detection(K.NON_FINITE, 3)]) == [
        Detection(K.SPIKE_FAST, 12), Detection(K.DIVERGENCE, None), Detection(K.NON_FINITE, 3)]


def test_counts_accumulate_and_perfect_predictor_scores_one():
    runs = [generate_run(k, seed=i) for i, k in enumerate([K.SPIKE_FAST, K.LEVEL_SHIFT, None, K.NON_FINITE])]
    s = score_runs(runs, lambda r: [(e.kind, e.onset) for e in r.events])
    assert s.runs == 4 and s.overall().f1 == 1.0 and s.clean_runs_with_alarm == 0
    total = Counts()
    total.add(Counts(tp=1, fp=2, fn=3, delays=[4]))
    total.add(Counts(tp=1, delays=[6]))
    assert (total.tp, total.fp, total.fn, total.delay()) == (2, 2, 3, 5.0)
