"""The held-out curve generator (evals.curves): ground truth, writers, seeds, families, matching."""
from __future__ import annotations

import numpy as np
import pytest

from lossguard.classify.incident import IncidentKind
from lossguard.io import read_log
from evals.curves import (
    FAMILIES, KIND_CYCLE, EventKind, LogFormat, NoiseModel, Schedule, Split, claims, families, family,
    formats_for, generate, score, seed_for, write_log,
)
from evals.curves.matching import Claim
from evals.curves.protocol import SEEDS_PER_FAMILY

ALL_KINDS = list(KIND_CYCLE)


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.name)
def test_ground_truth_is_consistent(fam):
    for kind in ALL_KINDS:
        for seed in (1, 2):
            run = generate(fam, kind, seed=seed)
            first, last = int(run.steps.min()), int(run.steps.max())
            real = run.events
            assert [e.kind for e in real] == ([] if kind is None else [kind]), (fam.name, kind, seed)
            for e in run.truth:
                assert first <= e.onset <= e.peak <= e.end <= last, (fam.name, kind, seed, e)
                assert e.onset in set(run.steps.tolist()), "events start on a logged step"
                assert e.metric in run.metrics, (e.metric, list(run.metrics))
                if e.window is not None:
                    assert e.window[0] == e.onset <= e.window[1] <= last
            assert len(run.steps) >= 30 or kind is EventKind.NON_FINITE  # a NaN run may die early
            assert run.span <= 1_000_000
            assert all(len(v) == len(run.steps) for v in run.metrics.values())


def test_injected_events_change_the_loss_where_the_truth_says():
    fam = family("cosine-gauss-dense")
    clean = generate(fam, None, seed=7)
    for kind in (EventKind.SPIKE_FAST, EventKind.LEVEL_SHIFT, EventKind.DIVERGENCE):
        run = generate(fam, kind, seed=7)
        e = run.events[0]
        loss = run.metrics["loss"]
        sigma = run.params["sigma"]
        before = loss[run.steps < e.onset][-20:]
        at = loss[run.steps == (e.end if kind is EventKind.DIVERGENCE else e.peak)][0]
        assert at - np.median(before) > 3 * sigma, kind
    assert "loss" in clean.metrics and not clean.events


def test_kinds_are_the_analysers_taxonomy():
    known = {k.value for k in IncidentKind}
    for k in EventKind:
        assert k.value in known or k.value == "regime_change", k


def _roundtrip_runs():
    fam = family("wsd-mult-mid")
    return [generate(fam, k, seed=11) for k in (EventKind.STREAM_SPIKE, EventKind.REPEATED_DATA,
                                                 EventKind.LOSS_SCALE_COLLAPSE, EventKind.NON_FINITE)]


@pytest.mark.parametrize("fmt", list(LogFormat), ids=lambda f: f.value)
def test_every_writer_round_trips_through_read_log(fmt, tmp_path):
    done = 0
    for n, run in enumerate(_roundtrip_runs()):
        if fmt not in formats_for(run):
            assert fmt is LogFormat.HF_TRAINER_STATE and run.segment.max() > 0
            continue
        log = read_log(write_log(run, fmt, tmp_path, name=f"r{n}"))
        assert len(log.segments) == int(run.segment.max()) + 1, (fmt, run.kind)
        for name, values in run.metrics.items():
            s = log.series[name]
            np.testing.assert_array_equal(s.steps, run.steps, err_msg=f"{fmt} {name}")
            tol = 2e-3 if name == "grad_norm" else 1e-5  # Megatron prints grad norms with 3 decimals
            np.testing.assert_allclose(s.values, values, rtol=tol, atol=tol, equal_nan=True,
                                       err_msg=f"{fmt} {name}")
        done += 1
    assert done >= 2


def test_writers_never_overwrite(tmp_path):
    run = generate(FAMILIES[0], None, seed=3)
    write_log(run, LogFormat.CSV, tmp_path, name="x")
    with pytest.raises(FileExistsError):
        write_log(run, LogFormat.CSV, tmp_path, name="x")


def test_seeds_reproduce_and_differ():
    fam = family("restarts-studentt")
    a, b, c = (generate(fam, EventKind.DIVERGENCE, seed=s) for s in (5, 5, 6))
    assert a.truth == b.truth
    for k in a.metrics:
        np.testing.assert_array_equal(a.metrics[k], b.metrics[k])
    assert a.truth != c.truth or not np.array_equal(a.metrics["loss"][:100], c.metrics["loss"][:100])


def test_families_partition_cleanly():
    names = [f.name for f in FAMILIES]
    assert len(names) == len(set(names)) >= 8
    tune, test = families("tune"), families("test")
    assert set(tune) | set(test) == set(FAMILIES) and not set(tune) & set(test)
    assert families("all") == list(FAMILIES)
    tune_noise = {m for f in tune for m in f.noise}
    test_noise = {m for f in test for m in f.noise}
    assert {NoiseModel.STUDENT_T, NoiseModel.AR1} <= test_noise
    assert {s for f in test for s in f.schedules} - {s for f in tune for s in f.schedules}
    assert tune_noise | test_noise == set(NoiseModel) and len(NoiseModel) >= 4
    assert {s for f in FAMILIES for s in f.schedules} == set(Schedule) and len(Schedule) >= 5
    assert min(f.points[0] for f in FAMILIES) <= 30 and max(f.every[1] for f in FAMILIES) == 100
    tune_seeds = {seed_for(f, i) for f in tune for i in (0, SEEDS_PER_FAMILY - 1)}
    test_seeds = {seed_for(f, i) for f in test for i in (0, SEEDS_PER_FAMILY - 1)}
    lo_t, hi_t = min(tune_seeds), max(tune_seeds)
    assert all(not lo_t <= s <= hi_t for s in test_seeds)
    assert all(f.split in (Split.TUNE, Split.TEST) for f in FAMILIES)


def test_matching_scores_a_perfect_and_a_wrong_predictor():
    run = generate(family("linear-mult-sparse"), EventKind.DIVERGENCE, seed=21)
    e = run.events[0]
    perfect = score(run, claims(run.events))
    assert (perfect.blind.tp, perfect.blind.fp, perfect.blind.fn) == (1, 0, 0)
    assert perfect.per_kind["divergence"].f1 == 1.0 and perfect.per_kind["divergence"].errors == [0]
    late = score(run, [Claim(kind="divergence", onset=e.onset - run.span // 3)])
    assert (late.blind.tp, late.blind.fp, late.blind.fn) == (0, 1, 1)
    assert late.per_kind["divergence"].errors == [] and late.per_kind["divergence"].nearest == [-(run.span // 3)]
    wrong = score(run, [Claim(kind="level_shift", onset=e.onset)])
    assert wrong.blind.tp == 1 and wrong.per_kind["divergence"].fn == 1 and wrong.per_kind["level_shift"].fp == 1
    double = score(run, [Claim(kind="divergence", onset=e.onset), Claim(kind="level_shift", onset=e.onset)])
    assert double.blind.fp == 1  # one event, one incident


def test_dont_care_outliers_absorb_spike_claims():
    run = next(generate(family("linear-studentt-long"), None, seed=s) for s in range(100)
               if any(t.ignore for t in generate(family("linear-studentt-long"), None, seed=s).truth))
    out = [t for t in run.truth if t.ignore][0]
    s = score(run, [Claim(kind="spike_slow_recovery", onset=out.onset)])
    assert s.clean and s.clean_alarms == 0 and s.blind.ignored == 1
    s = score(run, [Claim(kind="divergence", onset=out.onset)])  # not absorbed strictly, only kind-blind
    assert s.per_kind["divergence"].fp == 1


def test_protocol_writes_every_format_and_reads_it_back():
    from evals.curves import format_for, run_family

    seen, fmts = [], set()
    for i, run, log in run_family(family("const-short"), len(KIND_CYCLE), lambda log: log):
        fmts.add(format_for(run, i))
        main = "loss" if "loss" in run.metrics else next(k for k in run.metrics if k.startswith("loss/"))
        np.testing.assert_allclose(log.series[main].values, run.metrics[main], rtol=1e-5, equal_nan=True)
        seen.append(run.kind)
    assert seen == list(KIND_CYCLE) and fmts == set(LogFormat)


def test_a_collapse_from_a_scale_already_at_one_is_still_a_valid_truth():
    """Regression: run 123 of cosine-gauss-dense drew a collapse where the healthy scale had already
    drifted to 1, and the truth event's peak came before its onset (ValueError)."""
    from evals.curves import family, family_runs

    run = list(family_runs(family("cosine-gauss-dense"), 124))[123]
    for ev in run.truth:
        assert ev.onset <= ev.peak <= ev.end


def test_a_relaunch_keeps_the_loss_scale_a_loss_scale():
    """The superseded tail a relaunch writes redraws the loss series only: ``loss_scale`` is no loss
    (it was once taken for one: trend values in the scale column, an IndexError beside data streams)."""
    seen = {"streams": 0, "plain": 0}
    for fam in FAMILIES:
        for seed in range(40):
            run = generate(fam, None, seed=seed)
            if "resume_at" not in run.params or "loss_scale" not in run.metrics:
                continue
            scale = run.metrics["loss_scale"]
            assert np.all(np.log2(scale) == np.round(np.log2(scale))), (fam.name, seed)  # powers of two
            seen["streams" if any(k.startswith("loss/") for k in run.metrics) else "plain"] += 1
    assert seen["streams"] > 0 and seen["plain"] > 0, seen
