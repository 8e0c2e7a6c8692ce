"""Downsampling for drawing: every spike, every extreme and every NaN survives."""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lossguard.errors import ConfigError
from lossguard.report.downsample import bucket_extremes, downsample


def _noisy_run(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    steps = np.arange(n, dtype=np.int64)
    loss = 2.0 + 8.0 * np.exp(-steps / (n / 10)) + 0.05 * rng.standard_normal(n)
    return steps, loss


def test_small_curves_are_kept_whole():
    steps, loss = _noisy_run(1000)
    assert np.array_equal(downsample(steps, loss, buckets=250), np.arange(1000))


def test_every_one_step_spike_survives_a_million_points():
    steps, loss = _noisy_run(1_000_000)
    rng = np.random.default_rng(1)
    spikes = np.sort(rng.choice(len(steps), size=60, replace=False))
    # Spikes of very different sizes, some small enough to hide in a naive thinning, and dips.
    loss[spikes[:40]] += rng.uniform(0.3, 5.0, size=40)
    loss[spikes[40:]] -= rng.uniform(0.3, 1.0, size=20)
    t0 = time.perf_counter()
    kept = downsample(steps, loss, buckets=2000)
    elapsed = time.perf_counter() - t0
    assert len(kept) <= 5 * 2000  # 4 M4 points per bucket + at most `buckets` isolated spikes
    assert set(spikes.tolist()) <= set(kept.tolist()), "a spike was lost"
    assert elapsed < 1.0, f"downsampling 1M points took {elapsed:.2f} s"
    # Naive stride thinning to the same budget loses most of them: the test can tell the difference.
    stride = set(range(0, len(steps), len(steps) // len(kept)))
    assert len(set(spikes.tolist()) & stride) < 10


def test_two_spikes_in_one_bucket_both_survive():
    # 1M steps / 2000 buckets = 500 steps per bucket: spikes 100 steps apart share a bucket, and M4
    # alone keeps only the higher one. Zoomed in, the lower one must still be there.
    steps, loss = _noisy_run(1_000_000, seed=3)
    pairs = np.arange(20_000, 980_000, 48_000)
    small = pairs + 100
    loss[pairs] += 2.0
    loss[small] += 0.5  # 10 noise sigmas, but lower than its bucket-mate
    kept = set(downsample(steps, loss, buckets=2000).tolist())
    assert set(pairs.tolist()) <= kept
    assert set(small.tolist()) <= kept
    m4_only = set(downsample(steps, loss, buckets=2000, spike_z=None).tolist())
    assert not set(small.tolist()) <= m4_only  # the case this guards against is real


def test_non_finite_points_and_requested_steps_are_kept():
    steps, loss = _noisy_run(200_000)
    loss[123_457] = np.nan
    loss[150_000:150_500] = np.inf
    kept = set(downsample(steps, loss, buckets=500, keep_steps=[77_777, 10**9],
                          keep_ranges=[(90_000, 90_999)]).tolist())
    assert {123_457, 150_000, 150_499, 77_777} <= kept
    assert set(range(90_000, 91_000)) <= kept
    # The finite extremes are taken among finite points only: no NaN is chosen as a min or max.
    finite_kept = [i for i in kept if np.isfinite(loss[i])]
    assert max(loss[finite_kept]) == np.nanmax(loss[np.isfinite(loss)])


def test_irregular_steps_bucket_by_step_not_by_index():
    # Dense logging early, sparse later (every 100 steps): equal-width buckets in step units keep
    # the sparse part whole instead of crushing it into a few index buckets.
    steps = np.r_[np.arange(0, 50_000), np.arange(50_000, 1_050_000, 100)]
    loss = np.ones(len(steps))
    kept = downsample(steps, loss, buckets=1000)
    sparse_kept = np.count_nonzero(steps[kept] >= 50_000)
    assert sparse_kept >= 900  # ~1 bucket per 1000 steps, each holds its first/last point


def test_bad_arguments_raise_config_errors():
    with pytest.raises(ConfigError, match="buckets"):
        downsample(np.arange(3), np.ones(3), buckets=0)
    with pytest.raises(ConfigError, match="3 steps but 2 values"):
        downsample(np.arange(3), np.ones(2))


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=400),
       width=st.integers(1, 40))
def test_bucket_extremes_match_a_plain_loop(values, width):
    values = np.asarray(values)
    bucket = np.arange(len(values)) // width
    got = set(bucket_extremes(values, bucket).tolist())
    want = set()
    for b in np.unique(bucket):
        idx = np.flatnonzero(bucket == b)
        want |= {int(idx[0]), int(idx[-1]), int(idx[np.argmin(values[idx])]), int(idx[np.argmax(values[idx])])}
    assert got == want


@settings(max_examples=40, deadline=None)
@given(n=st.integers(50, 3000), buckets=st.integers(1, 60), seed=st.integers(0, 10**6))
def test_max_and_min_of_every_bucket_survive(n, buckets, seed):
    rng = np.random.default_rng(seed)
    steps = np.cumsum(rng.integers(1, 5, size=n))
    values = rng.standard_normal(n)
    kept = downsample(steps, values, buckets=buckets)
    assert np.all(np.diff(kept) > 0)
    # Any step window aligned to the buckets has the same max and min in the kept points.
    # Bucket k holds steps s with k <= (s - first) * buckets / span < k + 1.
    span = steps[-1] - steps[0] + 1
    edges = steps[0] + (np.arange(buckets + 1) * span + buckets - 1) // buckets
    for lo, hi in zip(edges[:-1], edges[1:]):
        full = values[(steps >= lo) & (steps < hi)]
        if not len(full):
            continue
        sel = kept[(steps[kept] >= lo) & (steps[kept] < hi)]
        assert values[sel].max() == full.max() and values[sel].min() == full.min()
