"""Sudden drops: a steep fall after a slow stretch, found in noisy runs and after short plateaus, never in
a smooth decline; both paths of the drop gate agree."""
from __future__ import annotations

import numpy as np
import pytest

from lossguard.analysis import analyze
from lossguard.classify.incident import IncidentKind as K
from lossguard.detect.drop import DropConfig, OnlineDropGate, smoothed_down, steep_gate_at
from lossguard.detect.outlier import OutlierConfig, score_finite
from lossguard.detect.series import OnlineSeriesDetector, detect_series
from lossguard.errors import ConfigError
from lossguard.runlog import RunLogBuilder


def _log(steps, values):
    b = RunLogBuilder("test")
    b.start_segment("synthetic.csv")
    b.add("loss", steps, values)
    return b.build()


def _curve(n, noise, seed, every=1):
    """A power-law decline with multiplicative Gaussian noise, logged every ``every`` steps."""
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1) * every
    trend = 2.0 + 6.0 * (steps / 50.0 + 1) ** -0.5
    return steps, trend, rng.normal(0, noise, n)


def _drop(steps, trend, at, depth, over, plateau):
    """Flatten the trend for ``plateau`` steps before step ``at``, then a smooth fall by ``depth``
    over ``over`` steps that stays (the shape of a grokking-like drop)."""
    i = int(np.searchsorted(steps, at))
    p0 = int(np.searchsorted(steps, at - plateau))
    y = trend.copy()
    y[p0:i] = trend[p0] * (1 - 0.01 * np.arange(i - p0) / max(1, i - p0))
    y[i:] = trend[i:] * (0.99 * trend[p0] / trend[i])
    x = np.clip((steps[i:] - steps[i]) / over, 0, 1)
    y[i:] *= 1 - depth * (3 * x ** 2 - 2 * x ** 3)
    return y


def _drops(a):
    return [i for i in a.incidents if i.kind == K.SUDDEN_DROP]


@pytest.mark.parametrize("seed", range(3))
def test_drop_in_a_noisy_run_below_the_point_test(seed):
    # 3.5% noise per step: a 20% drop is under 6 sigma per point, which the 7-sigma point test misses;
    # a median of 9 points sees it at ~14 standard errors.
    steps, trend, eps = _curve(20000, 0.035, seed)
    y = _drop(steps, trend, 12000, 0.20, 60, 3000) * (1 + eps)
    (d,) = _drops(analyze(_log(steps, y)))
    assert abs(d.onset - 12000) <= 25, d
    assert -0.3 < d.magnitude / d.baseline < -0.12


def test_drop_after_a_plateau_shorter_than_the_outlier_window():
    # A short run logged every 10 steps: the slow stretch is 60 points, half the 128-point window.
    steps, trend, eps = _curve(450, 0.006, 4, every=10)
    y = _drop(steps, trend, 2700, 0.2, 50, 600) * (1 + eps)
    (d,) = _drops(analyze(_log(steps, y)))
    assert abs(d.onset - 2700) <= 30, d


@pytest.mark.parametrize("noise, every", [(0.005, 1), (0.04, 1), (0.04, 10), (0.02, 5)])
def test_no_drop_in_a_smooth_decline(noise, every):
    steps, trend, eps = _curve(30000 // every, noise, 5, every=every)
    y = trend * (1 + eps)
    y[len(y) // 2] *= 0.6                      # one deep point (a bad batch) is not a drop
    assert _drops(analyze(_log(steps, y))) == []


def test_a_dip_that_comes_back_is_not_a_drop():
    steps, trend, eps = _curve(20000, 0.01, 6)
    y = trend * (1 + eps)
    y[12000:12015] *= 0.7                      # down for 15 points, then back
    assert _drops(analyze(_log(steps, y))) == []


@pytest.mark.parametrize("seed", range(4))
def test_gate_paths_agree(seed):
    rng = np.random.default_rng(seed)
    n = 4000
    y = 5 + np.cumsum(rng.normal(0, 0.01, n)) + rng.normal(0, rng.uniform(0.01, 0.2), n)
    for i in rng.integers(300, n - 50, 4):
        y[i:] -= rng.uniform(0.3, 1.5)
    ocfg, cfg = OutlierConfig(), DropConfig(span_points=int(rng.integers(9, 60)))
    sc = score_finite(y, ocfg)
    warm = np.arange(n) < ocfg.window
    cand, _ = smoothed_down(y, sc.baseline, sc.noise, warm, ocfg, cfg)
    vec = np.zeros(n, dtype=bool)
    vec[cand] = steep_gate_at(y, sc.noise, cand, cfg)
    gate = OnlineDropGate(ocfg, cfg)
    onl = np.array([gate.update(float(v), float(b), float(s), i < ocfg.window)
                    for i, (v, b, s) in enumerate(zip(y, sc.baseline, sc.noise))])
    assert vec.any()
    assert np.array_equal(vec, onl)


def test_series_paths_agree_with_drops_and_state_round_trip():
    steps, trend, eps = _curve(6000, 0.03, 7)
    y = _drop(steps, trend, 4000, 0.25, 40, 1000) * (1 + eps)
    a = detect_series(steps, y)
    assert any(e.end is None for e in a.dips)
    o = OnlineSeriesDetector()
    for s, v in zip(steps[:3000], y[:3000]):
        o.update(s, v)
    o2 = OnlineSeriesDetector()
    o2.load_state_dict(o.state_dict())
    for s, v in zip(steps[3000:], y[3000:]):
        o2.update(s, v)
    b = o2.finish()
    assert repr(a.dips) == repr(b.dips)


def test_config_is_validated():
    with pytest.raises(ConfigError, match="smooth_points"):
        DropConfig(smooth_points=8)
    with pytest.raises(ConfigError, match="slow_spans"):
        DropConfig(slow_spans=0)


def test_a_spike_after_the_drop_does_not_undo_it():
    # The loss dropped and stayed down; 400 points later a spike lifts it back above the old level
    # for a moment. The down-episode "comes back" there, but that is the spike, not a recovery.
    steps, trend, eps = _curve(20000, 0.008, 8)
    y = _drop(steps, trend, 12000, 0.2, 40, 3000)
    y[12400:12420] *= 1.6
    y *= 1 + eps
    a = analyze(_log(steps, y))
    (d,) = _drops(a)
    assert abs(d.onset - 12000) <= 25, d
    assert any(i.kind in (K.SPIKE_FAST, K.SPIKE_SLOW) and abs(i.onset - 12400) <= 3 for i in a.incidents)

