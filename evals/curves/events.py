"""Event injectors: each edits a :class:`~.draft.Draft` in place and records its ground truth.

Recovery budgets are set in steps *and* logged points, because a detector can only resolve what was
logged: a fast spike is back on trend within ``max(50 steps, 3 points)``; a slow one takes at least
``max(150 steps, 10 points)``. Heights are a fraction of the loss and at least 8 noise units, so
every event is visible to a person looking at the plot.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from evals.curves.draft import Draft
from evals.curves.truth import EventKind as E, TruthEvent

FAST_MAX_STEPS, FAST_MAX_POINTS = 50, 3
"""A fast spike recovers within the larger of these."""
SLOW_MIN_STEPS, SLOW_MIN_POINTS = 150, 10
"""A slow spike takes at least the larger of these to recover."""
STREAMS = ("web", "code", "books", "math")


def _decay(d: Draft, i: int, height: float, rec_points: int) -> np.ndarray:
    """A jump of ``height`` at ``i`` decaying to ~1% of it after ``rec_points`` points."""
    k = np.arange(d.n - i)
    return height * np.exp(-4.6 * k / max(rec_points, 1))


def _spike(d: Draft, rng: np.random.Generator, i: int, height: float, rec: int, kind: E, *,
           metric: str = "loss") -> None:
    target = d.effect if metric == "loss" else d.stream_effect[metric.split("/", 1)[1]]
    target[i:] += _decay(d, i, height, rec)
    d.grad_norm[i] *= rng.uniform(3, 10)  # a loss spike comes with a grad-norm jump: don't care
    d.truth.append(TruthEvent(kind=kind, onset=d.step(i), peak=d.step(i), end=d.step(i + rec), metric=metric))
    d.truth.append(TruthEvent(kind=E.GRAD_NORM_SPIKE, onset=d.step(i), peak=d.step(i), end=d.step(i + 1),
                              metric="grad_norm", ignore=True))


def spike_fast(d: Draft, rng: np.random.Generator) -> None:
    """A jump back on trend within the fast budget."""
    rec = max(1, min(FAST_MAX_POINTS, d.points(FAST_MAX_STEPS)))
    rec = int(rng.integers(1, rec + 1))
    i = d.pick(rng, 0.2, 0.85, room=rec + 2)
    _spike(d, rng, i, d.height(rng, i, 0.1, 0.6), rec, E.SPIKE_FAST)


def spike_slow(d: Draft, rng: np.random.Generator) -> None:
    """A jump that takes hundreds of steps (and at least 10 points) to come back."""
    lo = max(SLOW_MIN_POINTS, d.points(SLOW_MIN_STEPS))
    hi = max(lo + 1, min(4 * lo, int(0.3 * d.n)))
    rec = int(rng.integers(lo, hi + 1))
    i = d.pick(rng, 0.15, 0.6, room=rec + 2)
    _spike(d, rng, i, d.height(rng, i, 0.15, 0.8), rec, E.SPIKE_SLOW)


def spike_no_recovery(d: Draft, rng: np.random.Generator) -> None:
    """A jump that starts back down within a few points, then settles well above the old trend."""
    i = d.pick(rng, 0.3, 0.7, room=8)
    h = d.height(rng, i, 0.2, 0.8, min_sigma=14)
    keep = rng.uniform(0.4, 0.7)
    fall = int(rng.integers(2, 6))
    k = np.arange(d.n - i)
    d.effect[i:] += h * (keep + (1 - keep) * np.exp(-3 * k / fall))
    d.grad_norm[i] *= rng.uniform(3, 10)
    d.truth.append(TruthEvent(kind=E.SPIKE_NO_RECOVERY, onset=d.step(i), peak=d.step(i), end=d.step(d.n - 1)))
    d.truth.append(TruthEvent(kind=E.GRAD_NORM_SPIKE, onset=d.step(i), peak=d.step(i), end=d.step(i + 1),
                              metric="grad_norm", ignore=True))


def divergence(d: Draft, rng: np.random.Generator) -> None:
    """From a turn point the loss curves upward (convex) and keeps rising to the end of the run."""
    i = d.pick(rng, 0.4, 0.8, room=12)
    n_after = d.n - i
    rise = d.height(rng, d.n - 1, 0.3, 1.5, min_sigma=25)
    curv = rng.uniform(1.0, 4.0)
    u = np.arange(n_after) / max(n_after - 1, 1)
    shape = (np.exp(curv * u) - 1) / (np.exp(curv) - 1)
    d.effect[i:] += rise * shape
    d.grad_norm[i:] *= 1 + 4 * shape  # grad norms grow with the instability
    visible = i + int(np.argmax(rise * shape >= 3 * d.sigma))
    d.truth.append(TruthEvent(kind=E.DIVERGENCE, onset=d.step(i), peak=d.step(d.n - 1), end=d.step(d.n - 1),
                              window=(d.step(i), d.step(visible))))


def level_shift(d: Draft, rng: np.random.Generator) -> None:
    """The loss steps up to a new level within 1-2 points and stays there, noise unchanged."""
    i = d.pick(rng, 0.25, 0.75, room=10)
    h = d.height(rng, i, 0.06, 0.3, min_sigma=10)
    ramp = int(rng.integers(1, 3))
    d.effect[i:] += h * np.minimum(1.0, (np.arange(d.n - i) + 1) / ramp)
    d.truth.append(TruthEvent(kind=E.LEVEL_SHIFT, onset=d.step(i), peak=d.step(i + ramp - 1), end=d.step(d.n - 1)))


def sudden_drop(d: Draft, rng: np.random.Generator) -> None:
    """A long plateau, then a steep fall over 1-4% of the run to a lower curve (grokking-like)."""
    i = d.pick(rng, 0.45, 0.8, room=10)
    width = max(3, int(rng.uniform(0.01, 0.04) * d.n))
    drop = d.height(rng, i, 0.15, 0.35, min_sigma=12)
    plateau = float(d.trend[i]) + drop
    excess = np.maximum(plateau - d.trend, 0.0)
    s = np.ones(d.n)
    k = np.arange(d.n - i)
    s[i:] = 1 / (1 + np.exp(8 * (k / width - 0.5)))
    s[i:] = (s[i:] - s[-1]) / (s[i] - s[-1])
    d.effect += excess * s
    d.truth.append(TruthEvent(kind=E.SUDDEN_DROP, onset=d.step(i), peak=d.step(i + width // 2),
                              end=d.step(i + width)))


def regime_change(d: Draft, rng: np.random.Generator) -> None:
    """A lasting change of the noise spread (x3-6) with the level moving down, up or not at all."""
    i = d.pick(rng, 0.3, 0.7, room=max(20, d.n // 5))
    d.var_mult[i:] *= rng.uniform(3.0, 6.0)
    direction = rng.choice([-1.0, 0.0, 1.0])
    if direction:
        d.effect[i:] += direction * float(d.trend[i]) * rng.uniform(0.1, 0.4)
    d.truth.append(TruthEvent(kind=E.REGIME_CHANGE, onset=d.step(i), peak=d.step(i), end=d.step(d.n - 1)))


def grad_norm_spike(d: Draft, rng: np.random.Generator) -> None:
    """The gradient norm jumps 5-30x for 1-2 points; the loss does not move."""
    i = d.pick(rng, 0.2, 0.85, room=3)
    w = int(rng.integers(1, 3))
    d.grad_norm[i:i + w] *= rng.uniform(5, 30)
    d.truth.append(TruthEvent(kind=E.GRAD_NORM_SPIKE, onset=d.step(i), peak=d.step(i), end=d.step(i + w),
                              metric="grad_norm"))


def non_finite(d: Draft, rng: np.random.Generator) -> None:
    """1-3 NaN/inf losses (and NaN grad norms); half of these runs die right there."""
    i = d.pick(rng, 0.3, 0.9, room=4)
    w = int(rng.integers(1, 4))
    d.nan_points.extend(range(i, i + w))
    d.grad_nan_points.extend(range(i, i + w))
    if rng.random() < 0.5:
        d.truncate = i + w - 1
    d.truth.append(TruthEvent(kind=E.NON_FINITE, onset=d.step(i), peak=d.step(i), end=d.step(i + w - 1)))


def loss_scale_collapse(d: Draft, rng: np.random.Generator) -> None:
    """An fp16 overflow cascade: the scale halves at every point down to 1 and stays; training stalls."""
    assert d.loss_scale is not None, "a loss-scale collapse needs an fp16 run"
    i = d.pick(rng, 0.3, 0.8, room=20)
    start = float(d.loss_scale[i - 1])
    halvings = int(np.log2(start))
    per_point = int(rng.integers(1, 4))  # overflows per logging interval
    k = np.arange(d.n - i)
    d.loss_scale[i:] = np.maximum(1.0, start / 2.0 ** np.minimum((k + 1) * per_point, halvings))
    # A scale that already drifted down to 1 has nothing left to halve: the bottom is the onset itself.
    bottom = max(i, i + int(np.ceil(halvings / per_point)) - 1)
    d.effect[i:] += d.trend[i] - d.trend[i:]  # skipped steps: the loss stops improving
    if rng.random() < 0.5:
        d.grad_nan_points.extend(range(i, min(bottom + 1, d.n)))  # overflowed grads report NaN norms
    d.truth.append(TruthEvent(kind=E.LOSS_SCALE_COLLAPSE, onset=d.step(i), peak=d.step(bottom),
                              end=d.step(d.n - 1), metric="loss_scale"))


def stream_spike(d: Draft, rng: np.random.Generator) -> None:
    """A data-mix run: a spike on one loss stream only."""
    assert d.streams, "a stream spike needs a data-mix run"
    name = str(rng.choice(sorted(d.streams)))
    rec = int(rng.integers(1, max(2, min(FAST_MAX_POINTS, d.points(FAST_MAX_STEPS))) + 1))
    i = d.pick(rng, 0.2, 0.85, room=rec + 2)
    _spike(d, rng, i, d.height(rng, i, 0.15, 0.8) * d.streams[name], rec, E.STREAM_SPIKE, metric=f"loss/{name}")


def resume_spike(d: Draft, rng: np.random.Generator) -> None:
    """A relaunch from a checkpoint, after which the loss spikes briefly and recovers."""
    r = d.pick(rng, 0.3, 0.75, room=8)
    d.resume = (r, int(rng.integers(1, 6)))
    i = r + 1
    rec = int(rng.integers(1, 5))
    d.effect[i:] += _decay(d, i, d.height(rng, i, 0.05, 0.3), rec)
    d.truth.append(TruthEvent(kind=E.RESUME_SPIKE, onset=d.step(i), peak=d.step(i), end=d.step(i + rec)))


def repeated_data(d: Draft, rng: np.random.Generator) -> None:
    """A relaunch whose data loader restarted: the loss is lower than the first pass for a long stretch."""
    r = d.pick(rng, 0.3, 0.7, room=15)
    d.resume = (r, int(rng.integers(1, 6)))
    i = r + 1
    span = max(10, int(rng.uniform(0.15, 0.5) * (d.n - i)))
    dip = d.height(rng, i, 0.04, 0.15)
    k = np.arange(d.n - i)
    env = np.clip(np.minimum((k + 1) / 2, (span - k) / 3), 0, 1)  # in over 2 points, out over 3
    d.effect[i:] -= dip * env
    d.truth.append(TruthEvent(kind=E.REPEATED_DATA, onset=d.step(i), peak=d.step(i + 2),
                              end=d.step(min(i + span, d.n - 1))))


INJECTORS: dict[E, Callable[[Draft, np.random.Generator], None]] = {
    E.SPIKE_FAST: spike_fast, E.SPIKE_SLOW: spike_slow, E.SPIKE_NO_RECOVERY: spike_no_recovery,
    E.DIVERGENCE: divergence, E.LEVEL_SHIFT: level_shift, E.SUDDEN_DROP: sudden_drop,
    E.RESUME_SPIKE: resume_spike, E.REPEATED_DATA: repeated_data, E.STREAM_SPIKE: stream_spike,
    E.NON_FINITE: non_finite, E.LOSS_SCALE_COLLAPSE: loss_scale_collapse,
    E.GRAD_NORM_SPIKE: grad_norm_spike, E.REGIME_CHANGE: regime_change,
}
"""The injector of every kind."""
