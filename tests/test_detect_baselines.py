"""Each baseline rule on a tiny hand-made series where its published rule's answer is obvious."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from baselines import (llm_foundry, lightning_spike, losslint_cli, megatron, olmo_core,  # noqa: E402
                       ruptures_cp, zscore)
from baselines._common import episodes, trailing_mean_std  # noqa: E402

from lossguard.classify.incident import IncidentKind as K  # noqa: E402
from lossguard.runlog import RunLogBuilder  # noqa: E402


def _log(loss, grad_norm=None, start=1):
    b = RunLogBuilder("synthetic")
    b.start_segment("run.jsonl")
    steps = np.arange(start, start + len(loss))
    b.add("loss", steps, loss)
    if grad_norm is not None:
        b.add("grad_norm", steps, grad_norm)
    return b.build()


def _wiggle(n, level=2.0, amp=0.01):
    """A flat series with a deterministic +-amp wiggle (std ~amp/sqrt(2))."""
    return level + amp * np.sin(np.arange(n) * 1.3)


def test_episodes_group_consecutive_flags_at_the_first():
    steps = np.array([10, 20, 30, 40, 50, 60])
    assert episodes(steps, [0, 1, 1, 0, 1, 0]) == [20, 50]
    assert episodes(steps, [0] * 6) == []


def test_trailing_window_excludes_the_point_and_is_poisoned_by_nan():
    x = np.array([1.0, 2.0, 3.0, np.nan, 5.0, 6.0, 7.0])
    mean, std, cnt = trailing_mean_std(x, 2)
    assert mean[2] == 1.5 and cnt[2] == 2 and std[2] == pytest.approx(np.std([1, 2], ddof=1))
    assert np.isnan(mean[4]) and np.isnan(mean[5]) and mean[6] == 5.5


def test_olmo_core_skips_a_six_sigma_step_after_its_warmup_only():
    x = _wiggle(300)
    x[40] = 3.0      # before 64 values are held: never skipped
    x[200] = 3.0     # ~140 sigma
    x[250] = 1.0     # a drop: |z| is used, so it is skipped too
    f = olmo_core.flags(x)
    assert np.flatnonzero(f).tolist() == [200, 250]
    x2 = _wiggle(300)
    x2[200] = 2.0 + 5 * np.std(x2[72:200], ddof=1)   # 5 sigma: kept
    assert not olmo_core.flags(x2).any()
    gn = _wiggle(300, 1.0, 0.02)
    gn[150] = 5.0
    claims = olmo_core.detect(_log(_wiggle(300), gn))
    assert claims == [(K.GRAD_NORM_SPIKE, 151)]


def test_llm_foundry_needs_five_outliers_in_a_row_at_twice_the_mean():
    x = np.ones(300)
    x[150:154] = 2.5                      # 4 in a row: patience 4 tolerates them
    x[200:206] = 2.5                      # 6 in a row: reported at the 5th and 6th
    _, spike, high = llm_foundry.reports(x)
    assert np.flatnonzero(spike).tolist() == [204, 205] and not high.any()
    assert llm_foundry.detect(_log(x)) == [(K.SPIKE_FAST, 201)]   # onset: first outlier (step = index + 1)
    y = np.ones(300)
    y[150:] = 1.9                         # below 2x: never an outlier
    assert not llm_foundry.reports(y)[1].any()


def test_llm_foundry_high_losses_above_the_first_window_max():
    x = np.concatenate([np.full(100, 3.0), np.full(100, 3.0), np.full(200, 3.5)])
    _, spike, high = llm_foundry.reports(x)
    first = int(np.flatnonzero(high)[0])
    assert not spike.any() and first == 250      # half of the 100-point window above cap 3.0
    assert llm_foundry.detect(_log(x)) == [(K.DIVERGENCE, 251)]


def test_lightning_flags_three_times_the_running_mean_and_non_finite():
    x = np.ones(40)
    x[20] = 3.1
    x[30] = 2.9
    x[35] = np.nan
    f = lightning_spike.flags(x)
    assert np.flatnonzero(f).tolist() == [20, 35]
    assert lightning_spike.detect(_log(x)) == [(K.NON_FINITE, 36), (K.SPIKE_FAST, 21)]
    down = np.ones(20)
    down[10] = 0.1                        # an improvement is never a spike
    assert not lightning_spike.flags(down).any()


def test_megatron_flags_ten_times_the_max_of_the_first_hundred():
    x = np.ones(200)
    x[50] = 2.0                           # the max of the first 100
    x[150] = 19.9
    x[160] = 20.0
    x[170] = np.nan
    assert np.flatnonzero(megatron.flags(x)).tolist() == [160]
    assert megatron.detect(_log(x)) == [(K.SPIKE_FAST, 161), (K.NON_FINITE, 171)]


def test_zscore_flags_four_sigma_both_ways():
    x = _wiggle(300)
    sd = np.std(x[100:200], ddof=1)
    x[200] = 2.0 + 6 * sd
    x[250] = 2.0 - 6 * sd
    x[280] = 2.0 + 3 * sd
    claims = zscore.detect(_log(x))
    assert claims == [(K.SPIKE_FAST, 201), (K.SUDDEN_DROP, 251)]


def test_ruptures_finds_a_level_shift_and_a_late_drop():
    pytest.importorskip("ruptures", reason="the ruptures baseline needs lossguard[bench]")
    rng = np.random.default_rng(0)
    x = np.concatenate([np.full(400, 2.0), np.full(400, 2.4), np.full(400, 1.6)]) + rng.normal(0, 0.01, 1200)
    claims = ruptures_cp.detect(_log(x))
    kinds = {k: s for k, s in claims}
    assert set(kinds) == {K.LEVEL_SHIFT, K.SUDDEN_DROP}
    assert abs(kinds[K.LEVEL_SHIFT] - 401) <= 8 and abs(kinds[K.SUDDEN_DROP] - 801) <= 8
    rising = np.concatenate([np.full(600, 2.0), 2.0 + np.linspace(0, 1, 600) ** 1.5]) + rng.normal(0, 0.01, 1200)
    assert any(k == K.DIVERGENCE for k, _ in ruptures_cp.detect(_log(rising)))


def test_losslint_cli_findings_map_to_claims():
    pytest.importorskip("losslint", reason="the losslint baseline needs lossguard[bench]")
    x = _wiggle(200)
    x[100] = 40.0                         # > 10x the local median
    x[150] = np.nan
    claims = losslint_cli.detect(_log(x))
    assert claims == [(K.NON_FINITE, 151), (K.SPIKE_FAST, 101)]
    rising = np.linspace(2.0, 3.0, 200)   # last-decile median > 1.25x the first: "diverged", no step
    assert losslint_cli.detect(_log(rising)) == [(K.DIVERGENCE, None)]
    assert losslint_cli.detect(_log(_wiggle(200))) == []
