"""One outlier pass per series per analysis (``detect/shared_stats.py``): inside ``analyze`` the
policy replay reuses the detectors' trailing-window statistics; the analysis is the same to the
last number as with every pass computing its own, and outside the context nothing is kept."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

import lossguard.detect.outlier as outlier
from lossguard.analysis import analyze
from lossguard.detect.outlier import OutlierConfig, score_finite
from lossguard.detect.shared_stats import shared_window_stats
from lossguard.jsonsafe import strict_json
from lossguard.stitch import stitch
from evals.synthetic import GENERATED_KINDS, generate_run


def test_analyze_is_unchanged_by_sharing_the_window_statistics(monkeypatch):
    logs = [stitch(generate_run(k, seed=21, length=3000).log) for k in (None, *GENERATED_KINDS[:6])]
    shared = [strict_json(analyze(log).to_dict()) for log in logs]
    calls = []

    def own(x, key, compute):  # every pass computes its own statistics, as before the sharing
        calls.append(len(x))
        return compute()
    monkeypatch.setattr(outlier, "window_stats_once", own)
    alone = [strict_json(analyze(log).to_dict()) for log in logs]
    assert shared == alone
    assert len(calls) > len(logs) * 2  # the replay scored the series again: there was something to share


def test_a_hit_needs_equal_values_and_equal_window_settings():
    rng = np.random.default_rng(1)
    x = 2 + 0.01 * rng.standard_normal(5000)
    cfg = OutlierConfig()
    other_thresholds = replace(cfg, z_threshold=3.0, rel_threshold=0.5)  # not read by the statistics
    with shared_window_stats():
        a = score_finite(x, cfg)
        b = score_finite(x, other_thresholds)
        y = x.copy()
        y[-1] += 1.0
        c = score_finite(y, cfg)
        d = score_finite(x, replace(cfg, window=64))
    assert np.array_equal(a.baseline, b.baseline, equal_nan=True)
    assert np.array_equal(a.up, score_finite(x, cfg).up)
    assert np.array_equal(b.up, score_finite(x, other_thresholds).up)  # thresholds applied per pass
    assert np.array_equal(c.noise, score_finite(y, cfg).noise, equal_nan=True)  # other values: their own
    assert np.array_equal(d.baseline, score_finite(x, replace(cfg, window=64)).baseline, equal_nan=True)
    assert not np.array_equal(d.baseline, a.baseline, equal_nan=True)
