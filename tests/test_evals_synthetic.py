"""The synthetic-run generator: determinism, labels, shapes, and valid (stitchable) RunLogs."""
from __future__ import annotations

import time

import numpy as np
import pytest

from lossguard import metrics as M
from lossguard.classify.incident import IncidentKind as K
from lossguard.errors import ConfigError
from lossguard.stitch import stitch
from evals.synthetic import (FAST_RECOVERY_MAX, GENERATED_KINDS, SLOW_RECOVERY_MIN, SPIKE_KINDS, generate_run,
                                         generate_suite)


def _twin(kind: K, seed: int):
    """A run with one event and its clean twin (same base curve and noise)."""
    ev = generate_run(kind, seed=seed, nuisances=False)
    clean = generate_run(None, seed=seed, nuisances=False)
    steps, values = stitch(ev.log).live(M.LOSS)
    clean_steps, clean_values = stitch(clean.log).live(M.LOSS)
    assert np.array_equal(steps, clean_steps)
    return ev, steps, values / clean_values


def test_same_seed_same_run_and_different_seed_different_run():
    a, b = generate_run([K.SPIKE_SLOW, K.DIVERGENCE], seed=7), generate_run([K.SPIKE_SLOW, K.DIVERGENCE], seed=7)
    assert a.truth == b.truth and a.params == b.params
    for name in a.log.series:
        np.testing.assert_array_equal(a.log.series[name].values, b.log.series[name].values)
        np.testing.assert_array_equal(a.log.series[name].steps, b.log.series[name].steps)
    c = generate_run([K.SPIKE_SLOW, K.DIVERGENCE], seed=8)
    assert c.truth != a.truth


@pytest.mark.parametrize("kind", GENERATED_KINDS)
def test_every_kind_is_generated_and_labelled_once(kind):
    for seed in range(3):
        run = generate_run(kind, seed=seed)
        real = run.events
        assert [e.kind for e in real] == [kind], (seed, real)
        e = real[0]
        assert e.onset <= e.peak and (e.end is None or e.end >= e.peak)
        assert e.metric in run.log.series
        steps = run.log.series[e.metric].steps
        assert e.onset in set(steps.tolist()) or kind == K.LOSS_SCALE_COLLAPSE
        if kind == K.STREAM_SPIKE:
            assert e.metric == f"{M.LOSS}/{e.streams[0]}" and len(run.params["streams"]) >= 2
        if kind == K.GRAD_NORM_SPIKE:
            assert e.metric == M.GRAD_NORM
        if kind == K.LOSS_SCALE_COLLAPSE:
            assert e.metric == M.LOSS_SCALE and M.SKIPPED_ITERS in run.log.series


def test_fast_and_slow_spikes_return_to_trend_within_their_labelled_end():
    for kind in (K.SPIKE_FAST, K.SPIKE_SLOW):
        for seed in range(6):
            run, steps, ratio = _twin(kind, seed)
            e = run.events[0]
            i0, ie = np.searchsorted(steps, [e.onset, e.end])
            assert ratio[:i0].max() == pytest.approx(1.0)           # nothing before the onset
            assert ratio[np.searchsorted(steps, e.peak)] == pytest.approx(e.magnitude, rel=1e-6)
            assert 1.2 <= e.magnitude <= 3.0                       # LLM spikes: 1.2x-3x the trend
            assert (ratio[i0:ie] > 1.005).all()                     # elevated until the end...
            thr = max(0.5 * run.params["noise_rel"], 0.01)
            assert (ratio[ie:] - 1 < thr).all()                     # ...and back on the trend after it
            recovery = e.end - e.peak
            if kind == K.SPIKE_FAST:
                assert recovery <= FAST_RECOVERY_MAX + run.params["log_every"]
            else:
                assert recovery >= SLOW_RECOVERY_MIN - run.params["log_every"]


def test_level_shift_stays_and_divergence_keeps_rising():
    for seed in range(5):
        run, steps, ratio = _twin(K.LEVEL_SHIFT, seed)
        e = run.events[0]
        after = ratio[np.searchsorted(steps, e.peak):]
        assert after.min() == pytest.approx(e.magnitude) and after.max() == pytest.approx(e.magnitude)
        assert e.end is None and e.magnitude >= 1.06
        run, steps, ratio = _twin(K.DIVERGENCE, seed)
        e = run.events[0]
        start, visible = e.window
        assert ratio[:np.searchsorted(steps, start)].max() == pytest.approx(1.0)
        after = ratio[np.searchsorted(steps, start):]
        assert (np.diff(after) >= -1e-12).all() and after[-1] == pytest.approx(e.magnitude)
        assert start <= e.onset <= visible     # cause, turn upward, visible rise


def test_no_recovery_spike_settles_above_its_trend():
    for seed in range(5):
        run, steps, ratio = _twin(K.SPIKE_NO_RECOVERY, seed)
        e = run.events[0]
        ip = np.searchsorted(steps, e.peak)
        assert ratio[ip] == pytest.approx(e.magnitude, rel=1e-6)
        assert ratio[-1] >= 1.08 and ratio[-1] < e.magnitude       # came down, but not back


def test_sudden_drop_follows_a_plateau():
    for seed in range(4):
        run = generate_run(K.SUDDEN_DROP, seed=seed, nuisances=False)
        e = run.events[0]
        s, v = run.log.live(M.LOSS)
        i0, ie = np.searchsorted(s, [e.onset, e.end])
        width = ie - i0 + 5
        before = np.median(v[i0 - width:i0])
        after = np.median(v[ie:ie + width])
        assert after < 0.88 * before                                # a steep improvement...
        plateau = np.median(v[i0 - 6 * width:i0 - 5 * width])
        assert abs(plateau - before) < 0.03 * before                # ...after a slow stretch


def test_rollback_runs_stitch_to_the_labelled_dead_points():
    found = 0
    for seed in range(40):
        run = generate_run(K.REPEATED_DATA, seed=seed)
        if not run.params["dead"]:
            continue
        found += 1
        log = stitch(run.log)
        for name, s in log.series.items():
            dead = sorted(s.steps[~s.alive].tolist())
            assert dead == sorted(run.params["dead"].get(name, [])), name
        kinds = [g.kind for g in log.segments]
        overlaps = [seg["overlap_points"] for seg in run.params["segments"]]
        assert kinds[0] == "start"
        assert kinds[1:] == ["rollback" if o else "resume" for o in overlaps]
        # repeated data: the live loss is below the first pass at the same steps
        e = run.events[0]
        ls = log.series[M.LOSS]
        at = (ls.steps >= e.onset) & (ls.steps < e.end)
        first = dict(zip(ls.steps[~ls.alive & at].tolist(), ls.values[~ls.alive & at].tolist(), strict=True))
        live = dict(zip(ls.steps[ls.alive & at].tolist(), ls.values[ls.alive & at].tolist(), strict=True))
        common = [st for st in first if st in live and np.isfinite(first[st])]
        if e.note.endswith("after a rollback"):
            assert np.median([live[st] / first[st] for st in common]) < 1 - 0.5 * (1 - e.magnitude)
    assert found >= 5


def test_repeated_data_jumps_back_up_at_its_end():
    for seed in range(5):
        run, steps, ratio = _twin(K.REPEATED_DATA, seed)
        e = run.events[0]
        i0, ie = np.searchsorted(steps, [e.onset, e.end])
        assert (ratio[i0:ie] < 1).all() and ratio[ie:].min() == pytest.approx(1.0)
        assert run.log.segments[1].first_step == e.onset              # it starts at a resume


def test_suite_covers_every_kind_with_clean_runs_quickly():
    t = time.perf_counter()
    runs = generate_suite(120, seed=123)
    elapsed = time.perf_counter() - t
    assert len(runs) == 120
    assert sum(not r.events for r in runs) >= 24                    # at least 20% clean
    counts = {k: sum(any(e.kind == k for e in r.events) for r in runs) for k in GENERATED_KINDS}
    assert min(counts.values()) >= 96 // len(GENERATED_KINDS)                     # every kind, evenly
    assert elapsed < 30, elapsed                                    # ~5 s/500 runs on an idle core
    mags = [e.magnitude for r in runs for e in r.events if e.kind in (K.SPIKE_FAST, K.SPIKE_SLOW)]
    assert 1.2 <= min(mags) and max(mags) <= 3.0
    assert any(r.params["log_every"] == 1 for r in runs) and any(r.params["log_every"] == 10 for r in runs)
    assert any(r.params["fp16"] for r in runs) and any(len(r.log.segments) > 1 for r in runs)
    levels = [r.params["loss_start"] for r in runs] + [r.params["loss_floor"] for r in runs]
    assert min(levels) < 2.0 and max(levels) > 9.0
    lengths = [r.params["length"] for r in runs]
    assert min(lengths) < 5000 and max(lengths) > 25000


def test_spike_kinds_and_bad_arguments():
    assert K.GRAD_NORM_SPIKE not in SPIKE_KINDS and K.STREAM_SPIKE in SPIKE_KINDS
    with pytest.raises(ConfigError, match="at most one"):
        generate_run([K.DIVERGENCE, K.LEVEL_SHIFT], seed=1)
    with pytest.raises(ConfigError, match="unknown kind"):
        generate_run(["spikey"], seed=1)
    with pytest.raises(ConfigError, match="logged points"):
        generate_run(None, seed=1, length=500, log_every=10)


def test_non_finite_values_are_really_non_finite():
    for seed in range(6):
        run = generate_run(K.NON_FINITE, seed=seed)
        e = run.events[0]
        s = run.log.series[e.metric]
        v = s.values[s.steps == e.onset]
        assert len(v) and not np.isfinite(v).all()
        before = s.values[s.steps < e.onset]
        assert np.isfinite(before).all()
