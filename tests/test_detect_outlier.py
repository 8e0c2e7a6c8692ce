"""The robust outlier statistic: online and vectorised paths agree exactly; known answers."""
from __future__ import annotations

import numpy as np
import pytest

from lossguard.detect.outlier import OnlineOutlier, OutlierConfig, score
from lossguard.errors import ConfigError


def _online(values, cfg):
    o = OnlineOutlier(cfg)
    return [o.update(v) for v in values]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("side", ["up", "down", "both"])
def test_online_equals_vectorised_on_heavy_tailed_noise_with_nans(seed, side):
    rng = np.random.default_rng(seed)
    x = 2.0 + np.abs(rng.standard_cauchy(1500)) * 0.1
    x[rng.integers(0, 1500, 12)] = np.nan
    x[rng.integers(0, 1500, 3)] = np.inf
    cfg = OutlierConfig(side=side, window=64, stride=8)
    vec = score(x, cfg)
    onl = _online(x, cfg)
    assert np.array_equal(vec.outlier, [v.outlier for v in onl])
    assert np.array_equal(vec.baseline, [v.baseline for v in onl], equal_nan=True)
    assert np.array_equal(vec.noise, [v.noise for v in onl], equal_nan=True)
    assert vec.outlier.sum() > 0


def test_state_dict_round_trip_continues_identically():
    rng = np.random.default_rng(3)
    x = 3 + rng.normal(0, 0.01, 600)
    x[450] = 5.0
    a = OnlineOutlier()
    first = [a.update(v) for v in x[:300]]
    b = OnlineOutlier()
    b.load_state_dict(a.state_dict())
    rest_a = [a.update(v) for v in x[300:]]
    rest_b = [b.update(v) for v in x[300:]]
    assert [v.outlier for v in rest_a] == [v.outlier for v in rest_b]
    assert rest_b[150].outlier and not any(v.outlier for v in first)


def test_spike_found_on_a_falling_curve_where_the_window_mad_would_hide_it():
    # Early in a run the trailing window spans a steep decline; its MAD is mostly trend. The noise
    # from first differences is not, so a 20% spike is flagged.
    t = np.arange(1, 400, dtype=float)
    rng = np.random.default_rng(0)
    x = 2 + 8 * t ** -0.5 * (1 + rng.normal(0, 0.003, len(t)))
    x[250] *= 1.2
    s = score(x)
    assert s.outlier[250]
    assert s.outlier.sum() == 1


def test_near_zero_level_abstains():
    rng = np.random.default_rng(1)
    x = rng.standard_t(3, 2000) * 0.15  # an RL-style objective: noise around 0
    x[1000] = 2.5
    assert not score(x).outlier.any()
    # the same excursion on a positive loss level is flagged
    assert score(x + 10.0).outlier[1000]


def test_short_log_gets_a_verdict_after_min_points():
    # The BLOOM-176B excerpt: a handful of points before the spike.
    x = np.array([2.4636, 2.1988, 2.2204, 2.5952, 2.2416, 2.3453, 5.0981, 3.492, 3.213])
    s = score(x)
    assert np.flatnonzero(s.outlier).tolist() == [6]


def test_config_errors_name_every_field():
    with pytest.raises(ConfigError) as e:
        OutlierConfig(window=2, z_threshold=0, side="sideways")
    msg = str(e.value)
    assert "window" in msg and "z_threshold" in msg and "side" in msg
