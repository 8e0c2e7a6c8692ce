"""Level shifts from the window-median step test: a step up that stays is one; a decline that merely
stops (a kink into a plateau) is not; a step a window after a clean resume is still one."""
from __future__ import annotations

import numpy as np

from lossguard.analysis import analyze
from lossguard.classify.incident import IncidentKind as K
from lossguard.detect.outlier import OutlierConfig, refresh_counts, score_finite
from lossguard.detect.shift import find_shifts
from lossguard.runlog import RunLogBuilder


def _curve(n, noise, seed):
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1) * 5
    return steps, 2.0 + 6.0 * (steps / 50.0 + 1) ** -0.5, rng.normal(0, noise, n)


def _shifts(y):
    cfg = OutlierConfig()
    sc = score_finite(y, cfg)
    return find_shifts(y, sc.baseline, sc.noise, refresh_counts(len(y), cfg), cfg.window)


def test_a_step_up_that_stays_is_found_where_it_is():
    steps, trend, eps = _curve(3000, 0.005, 1)
    y = trend.copy()
    y[1500:] *= 1.07                            # 7%: below the point test's 12%
    y *= 1 + eps
    (sh,) = _shifts(y)
    assert abs(sh.at - 1500) <= 3
    assert 0.05 < sh.jump / sh.level_before < 0.1


def test_a_decline_that_stops_before_a_drop_is_not_a_step():
    # A decline that goes flat, then drops a window later (the slow stretch before a grokking-like
    # drop): the second difference of window medians at the kink is as large as a step's and the
    # drop after it hides that the curve kept "climbing" against the old trend, but it never rose.
    steps, trend, eps = _curve(1200, 0.004, 2)
    y = trend.copy()
    y[300:420] = trend[300]
    y[420:] = trend[420:] * trend[300] / trend[420] * 0.75
    y *= 1 + eps
    assert _shifts(y) == []
    b = RunLogBuilder("test")
    b.start_segment("a.csv")
    b.add("loss", steps, y)
    a = analyze(b.build())
    assert not a.of_kind(K.LEVEL_SHIFT)
    (d,) = a.of_kind(K.SUDDEN_DROP)
    assert abs(d.onset - int(steps[420])) <= 10 * 5


def test_a_shift_a_window_after_a_clean_resume_is_reported():
    steps, trend, eps = _curve(3000, 0.004, 3)
    y = trend.copy()
    y[1580:] *= 1.08
    y *= 1 + eps
    b = RunLogBuilder("test")
    b.start_segment("run1.csv")
    b.add("loss", steps[:1500], y[:1500])
    b.start_segment("run2.csv")
    b.add("loss", steps[1500:], y[1500:])
    (inc,) = analyze(b.build()).of_kind(K.LEVEL_SHIFT)
    assert abs(inc.onset - int(steps[1580])) <= 3 * 5
