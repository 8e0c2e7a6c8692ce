"""Whole-log detectors added for issue 11: regime changes (noise jumps), loss-scale halving bursts,
the smooth bend of a divergence; and the zero-threshold guard of the divergence twins."""
from __future__ import annotations

import numpy as np
import pytest

from lossguard.detect.knot import best_bend
from lossguard.detect.loss_scale import LossScaleConfig, find_bursts
from lossguard.detect.regime import RegimeConfig, find_regime_changes
from lossguard.detect.series import OnlineSeriesDetector, detect_series
from lossguard.errors import ConfigError


def _curve(n, seed, noise=0.01):
    rng = np.random.default_rng(seed)
    t = np.arange(1, n + 1, dtype=float)
    return 2.5 + 6 * t ** -0.4 * (1 + rng.normal(0, noise, n)), rng


def test_a_lasting_noise_jump_is_a_regime_change_at_its_onset():
    x, rng = _curve(3000, 0)
    x[1800:] = 1.2 + np.abs(rng.normal(0, 0.3, 1200))   # lower and far noisier, to the end
    (r,) = find_regime_changes(x, 128)
    assert abs(r.onset - 1800) <= 8 and r.end is None
    assert r.ratio >= 3 and r.level_after < r.level_before


@pytest.mark.parametrize("seed", range(4))
def test_smooth_and_heavy_tailed_curves_have_no_regime_change(seed):
    x, rng = _curve(5000, seed)
    x *= 1 + 0.02 * rng.standard_t(3, len(x)).clip(-6, 6)   # heavy tails, same scale throughout
    x[::97] *= 1.4                                           # and single bad batches
    assert find_regime_changes(x, 128) == []


def test_a_noise_burst_that_ends_within_a_window_is_not_a_regime():
    x, rng = _curve(3000, 1)
    x[1500:1560] += rng.normal(0, 0.3, 60)                   # noisy for half a window, then calm again
    assert find_regime_changes(x, 128) == []


def test_regime_config_errors():
    with pytest.raises(ConfigError, match="noise_ratio"):
        RegimeConfig(noise_ratio=1.0)


def test_halving_bursts_past_the_calibration_are_collapses_in_progress():
    steps = np.arange(8001, 8009)
    scale = np.array([65536, 32768, 16384, 16384, 8192, 4096, 2048, 2048.0])
    (c,) = find_bursts(steps, scale)
    assert (c.onset, c.trigger, c.stop, c.peak_scale, c.min_scale, c.recovered) == (1, 6, 7, 65536.0, 2048.0, False)
    # Megatron's opening calibration halves every step from 2**32: not a collapse
    assert find_bursts(np.arange(1, 40), 2.0 ** np.maximum(32 - np.arange(39), 16)) == []
    # healthy dynamic scaling: a halving, growth, a few halvings (DeepSpeed-Chat: 65536 -> 8192)
    assert find_bursts(np.arange(500, 507), np.array([65536, 32768, 65536, 32768, 16384, 8192, 16384.0])) == []
    with pytest.raises(ConfigError, match="burst_points"):
        LossScaleConfig(burst_points=1)


def test_best_bend_finds_kinks_and_smooth_turns():
    rng = np.random.default_rng(3)
    t = np.arange(600, dtype=float)
    kink = 3.0 - 0.001 * t + 0.004 * np.maximum(0, t - 400) + rng.normal(0, 0.004, len(t))
    smooth = 3.0 - 0.001 * t + 2e-4 * np.maximum(0, t - 300) ** 1.5 + rng.normal(0, 0.004, len(t))
    quadratic = 3.0 - 0.001 * t + 2e-5 * np.maximum(0, t - 300) ** 2 + rng.normal(0, 0.004, len(t))
    assert abs(best_bend(kink) - 400) <= 15
    assert abs(best_bend(smooth) - 300) <= 15
    assert abs(best_bend(quadratic, powers=(2.0,)) - 300) <= 15
    assert best_bend(quadratic) > 300  # a linear or 1.5-power hinge dates a quadratic turn late
    assert best_bend(kink[:10]) is None
    big = np.concatenate([np.full(50_000, 3.0), 3.0 + 1e-5 * np.arange(50_000)])  # block-averaged path
    assert abs(best_bend(big) - 50_000) <= 200


def test_a_loss_stuck_at_zero_gives_no_divergence_either_way():
    # zero level and zero noise made a zero threshold, "crossed" at once (IndexError in find_divergences)
    steps = np.arange(1, 40)
    values = np.concatenate([[2.63], np.zeros(38)])
    whole = detect_series(steps, values)
    online = OnlineSeriesDetector()
    for s, v in zip(steps, values):
        online.update(s, v)
    assert whole.divergences == [] and repr(online.finish().divergences) == repr(whole.divergences)
