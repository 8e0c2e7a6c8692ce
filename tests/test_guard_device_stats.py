"""The guard's on-device outlier test agrees exactly with the analyser's ``score()``."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from lossguard.detect.outlier import OnlineOutlier, OutlierConfig, score  # noqa: E402
from lossguard.guard.judge.device_stats import DeviceOutlier  # noqa: E402


def _series(rng: np.random.Generator, n: int) -> np.ndarray:
    """A decaying loss curve with noise, multiplicative spikes, NaNs and an Inf; float32 values."""
    x = 3.0 * np.exp(-np.arange(n) / 300) + 0.5 + rng.normal(0, 0.02, n)
    for k in rng.integers(10, n, 10):
        x[k] *= rng.uniform(1.05, 4.0)
    x[rng.integers(0, n, 3)] = np.nan
    x[rng.integers(0, n)] = np.inf
    return x.astype(np.float32).astype(np.float64)


def _device_run(x: np.ndarray, cfg: OutlierConfig):
    det = DeviceOutlier(cfg)
    out, z = [], []
    for v in x:
        r = det.update(torch.tensor(v, dtype=torch.float32))  # the guard sees a float32 loss
        out.append(bool(r.outlier))
        z.append(float(r.z))
    return np.array(out), np.array(z), det


@pytest.mark.parametrize("seed", range(12))
def test_device_outlier_flags_exactly_what_score_flags(seed):
    rng = np.random.default_rng(seed)
    window = int(rng.integers(4, 80))
    cfg = OutlierConfig(window=window, stride=int(rng.integers(1, window + 1)),
                        min_points=int(rng.integers(2, window + 1)), side=("up", "down", "both")[seed % 3])
    x = _series(rng, 500)
    ref = score(x, cfg)
    out, z, _ = _device_run(x, cfg)
    assert ref.outlier.sum() > 3  # the series has spikes the test must find
    np.testing.assert_array_equal(out, ref.outlier)
    np.testing.assert_array_equal(z, ref.z)  # bitwise, NaN where the analyser has NaN


def test_default_config_agrees_and_catches_spikes():
    rng = np.random.default_rng(7)
    x = _series(rng, 2000)
    cfg = OutlierConfig()
    ref = score(x, cfg)
    out, z, _ = _device_run(x, cfg)
    np.testing.assert_array_equal(out, ref.outlier)
    np.testing.assert_array_equal(z, ref.z)


def test_state_dict_round_trip_continues_exactly():
    rng = np.random.default_rng(3)
    x = _series(rng, 400)
    cfg = OutlierConfig(window=32, stride=4)
    full, _, _ = _device_run(x, cfg)
    _, _, det = _device_run(x[:150], cfg)
    fresh = DeviceOutlier(cfg)
    fresh.load_state_dict(det.state_dict())
    rest = [bool(fresh.update(torch.tensor(v)).outlier) for v in x[150:]]
    np.testing.assert_array_equal(np.array(rest), full[150:])
    # and it matches the analyser's own online twin on the same prefix
    online = OnlineOutlier(cfg)
    for v in x[:150]:
        online.update(v)
    assert det.state_dict()["count"] == online.count
