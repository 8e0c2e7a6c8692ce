"""Episodes, divergence, drops, non-finite runs: online state machines equal the whole-log path."""
from __future__ import annotations

import numpy as np
import pytest

from lossguard.detect.episode import EpisodeConfig, OnlineEpisodes, find_episodes
from lossguard.detect.loss_scale import find_collapses
from lossguard.detect.nonfinite import OnlineNonFinite, find_nonfinite
from lossguard.detect.outlier import OnlineOutlier, score
from lossguard.detect.series import OnlineSeriesDetector, detect_series
from lossguard.errors import ConfigError


def _curve(n=20000, seed=1):
    rng = np.random.default_rng(seed)
    t = np.arange(1, n + 1)
    y = 2 + 8 * t ** -0.4 * (1 + rng.normal(0, 0.01, n))
    return t, y, rng


def _online_series(t, y, cfg=None):
    o = OnlineSeriesDetector(cfg)
    for s, v in zip(t, y):
        o.update(s, v)
    return o.finish()


def _same(a, b):
    # repr: exact for floats (shortest round trip) and NaN-safe, unlike == on dataclasses holding NaN
    assert repr(a.spikes) == repr(b.spikes)
    assert repr(a.dips) == repr(b.dips)
    assert repr(a.divergences) == repr(b.divergences)
    assert repr(a.nonfinite) == repr(b.nonfinite)
    assert np.array_equal(a.baseline, b.baseline, equal_nan=True)
    assert np.array_equal(a.steps, b.steps)


def test_known_events_and_both_paths_agree():
    t, y, _ = _curve()
    y[5000:5003] += 2.0                       # fast spike
    y[9000:9400] += np.linspace(1.5, 0, 400)  # slow spike
    y[12000:] -= 0.3                          # sudden drop
    y[16000:] += np.linspace(0, 1, 4000)      # divergence
    y[7000] = np.nan
    a = detect_series(t, y)
    _same(a, _online_series(t, y))
    steps = a.steps
    spikes = [(int(steps[e.onset]), e.status) for e in a.spikes]
    assert (5001, "fast") in spikes
    assert any(abs(s - 9001) <= 2 and st == "slow" for s, st in spikes)
    # The drop test decides on the median of the last 9 points: 5 of them must be down (12001 + 4).
    assert any(abs(int(steps[e.onset]) - 12005) <= 2 and e.end is None for e in a.dips)
    assert any(abs(int(steps[d.minimum_at]) - 16001) <= 200 and d.end is None for d in a.divergences)
    assert [int(a.all_steps[r.start]) for r in a.nonfinite] == [7001]


@pytest.mark.parametrize("seed", range(8))
def test_paths_agree_on_random_walks_with_jumps(seed):
    rng = np.random.default_rng(seed)
    n = 3000
    y = 5 + np.cumsum(rng.normal(0, 0.01, n)) + rng.normal(0, 0.02, n)
    for i in rng.integers(200, n - 50, 6):
        y[i:i + rng.integers(1, 40)] += rng.uniform(0.5, 2)
    y[rng.integers(0, n, 5)] = np.nan
    t = np.arange(n) * 5
    _same(detect_series(t, y), _online_series(t, y))


def test_paths_agree_on_synthetic_runs():
    from evals.synthetic import generate_run
    from lossguard.stitch import stitch

    for seed, kind in [(1, "spike_slow_recovery"), (2, "level_shift"), (3, "sudden_drop"), (4, "divergence"),
                       (5, "non_finite")]:
        log = stitch(generate_run(kind, seed=seed, length=6000).log)
        s, v = log.live("loss")
        _same(detect_series(s, v), _online_series(s, v))


def test_episode_frozen_baseline_and_budget():
    x = np.full(500, 1.0) + np.random.default_rng(0).normal(0, 0.001, 500)
    x[200:] += 0.5  # a level shift: never back, closed at the budget
    sc = score(x)
    cfg = EpisodeConfig(fast_points=10, budget_points=100)
    eps = find_episodes(x, sc.outlier, sc.baseline, sc.noise, cfg)
    assert eps[0].onset == 200 and eps[0].end is None and eps[0].status == "none" and eps[0].closed == 300
    assert abs(eps[0].base - 1.0) < 0.01           # the shift never leaked into its baseline
    assert abs(eps[0].settled - 1.5) < 0.01
    online = OnlineEpisodes(cfg)
    out = OnlineOutlier()
    closed = [e for v in x if (e := online.update(v, *(lambda p: (p.outlier, p.baseline, p.noise))(out.update(v)))) is not None]
    assert closed[0] == eps[0]


def test_nonfinite_runs_both_ways():
    x = np.array([1, np.nan, np.nan, 2, np.inf, 3, np.nan])
    runs = find_nonfinite(x)
    assert [(r.start, r.stop, r.nan, r.recovered) for r in runs] == [(1, 2, 2, True), (4, 4, 0, True), (6, 6, 1, False)]
    o = OnlineNonFinite()
    got = [r for v in x if (r := o.update(v)) is not None] + [o.finish()]
    assert got == runs


def test_loss_scale_collapse_only_at_the_floor():
    healthy = np.array([2.0 ** 32, 2.0 ** 20, 2.0 ** 16, 2.0 ** 15, 2.0 ** 16, 2.0 ** 13, 2.0 ** 14])
    assert find_collapses(healthy) == []
    collapsing = np.array([65536.0, 65536, 32768, 1024, 16, 1, 1, 1])
    (c,) = find_collapses(collapsing)
    assert (c.trigger, c.stop, c.min_scale, c.recovered) == (5, 7, 1.0, False)


def test_episode_config_errors():
    with pytest.raises(ConfigError, match="budget_points"):
        EpisodeConfig(fast_points=50, budget_points=10)


def test_knot_of_a_two_piece_line():
    from lossguard.detect.knot import best_knot

    rng = np.random.default_rng(0)
    t = np.arange(400, dtype=float)
    y = np.where(t < 250, 3.0 - 0.001 * t, 3.0 - 0.25 + 0.004 * (t - 250)) + rng.normal(0, 0.005, len(t))
    assert abs(best_knot(y) - 250) <= 8
    assert best_knot(y[:8]) is None


def test_online_detector_resumes_exactly_from_its_state_dict():
    import pickle

    t, y, _ = _curve(n=6000, seed=4)
    y[3000:3100] += np.linspace(1.0, 0, 100)
    whole = _online_series(t, y)
    a = OnlineSeriesDetector()
    for s, v in zip(t[:3050], y[:3050]):   # stop in the middle of an open episode
        a.update(s, v)
    b = OnlineSeriesDetector()
    b.load_state_dict(pickle.loads(pickle.dumps(a.state_dict())))
    for s, v in zip(t[3050:], y[3050:]):
        b.update(s, v)
    _same(whole, b.finish())
