"""Generate one run of a curve family with one injected event (or none), with its ground truth.

The run is built on its live timeline (:class:`~.draft.Draft`): schedule -> LR -> noiseless loss,
noise from the family's model, grad norms, an fp16 loss scale for some runs, loss streams for
data-mix runs; the event's injector edits it; then it is laid out as the rows a logger would have
written (a relaunch writes the superseded tail first, then goes back to the checkpoint).
"""
from __future__ import annotations

import numpy as np

from evals.curves.draft import Draft
from evals.curves.events import INJECTORS, STREAMS
from evals.curves.families import MAX_STEPS, Family
from evals.curves.noise import NoiseModel, outlier_points, sample_noise
from evals.curves.schedules import Schedule, loss_curve, lr_curve, random_shape
from evals.curves.truth import CurveRun, EventKind as E, TruthEvent

PEAK_LR_RANGE = (1e-4, 1e-3)
FP16_SHARE = 0.25
"""Share of runs (besides loss-scale collapses) that log an fp16 loss scale with normal dynamics."""
SCALE_GROWTH_STEPS = 2000
"""Steps without overflow after which the dynamic loss scaler doubles the scale (PyTorch's default)."""


def _loss_scale(rng: np.random.Generator, steps: np.ndarray) -> np.ndarray:
    """Normal dynamic loss scaling: doubles every SCALE_GROWTH_STEPS, halves on rare overflows."""
    out = np.empty(len(steps))
    scale, since = 2.0 ** 16, 0
    every = int(steps[1] - steps[0]) if len(steps) > 1 else 1
    for i in range(len(steps)):
        since += every
        if rng.random() < 0.005:
            scale, since = max(scale / 2, 1.0), 0
        elif since >= SCALE_GROWTH_STEPS and scale < 2.0 ** 20:
            scale, since = scale * 2, 0
        out[i] = scale
    return out


def _draft(fam: Family, kind: E | None, rng: np.random.Generator) -> tuple[Draft, dict]:
    every = int(rng.integers(fam.every[0], fam.every[1] + 1))
    n = int(rng.integers(fam.points[0], fam.points[1] + 1))
    n = max(30, min(n, MAX_STEPS // every))
    steps = every * np.arange(1, n + 1, dtype=np.int64)
    schedule = Schedule(rng.choice([s.value for s in fam.schedules]))
    model = NoiseModel(rng.choice([m.value for m in fam.noise]))
    shape = random_shape(rng)
    total = int(steps[-1])
    warmup = int(shape.warmup_frac * total)
    lr = lr_curve(schedule, steps, total, warmup=warmup, rng=rng)
    trend = loss_curve(shape, steps, lr, warmup=warmup)
    sigma = float(rng.uniform(*fam.rel_noise)) * float(trend[-1])
    g0 = rng.uniform(0.2, 2.0)
    grad = g0 * (1 + 2 * np.exp(-steps / (0.05 * total))) * np.exp(0.15 * rng.standard_normal(n))
    d = Draft(steps=steps, every=every, trend=trend, effect=np.zeros(n), var_mult=np.ones(n),
              noise=sample_noise(model, rng, n, level=trend), sigma=sigma, grad_norm=grad,
              lr=lr * rng.uniform(*PEAK_LR_RANGE))
    if kind is E.LOSS_SCALE_COLLAPSE or (kind is not E.STREAM_SPIKE and rng.random() < FP16_SHARE):
        d.loss_scale = _loss_scale(rng, steps)
    if kind is E.STREAM_SPIKE or (kind is None and rng.random() < 0.15):
        names = rng.choice(STREAMS, size=int(rng.integers(2, 4)), replace=False)
        d.streams = {str(s): float(rng.uniform(0.7, 1.4)) for s in names}
        d.stream_effect = {s: np.zeros(n) for s in d.streams}
    params = {"schedule": schedule.value, "noise": model.value, "points": n, "log_every": every,
              "length": total, "sigma": sigma, "shape": shape.__dict__}
    return d, params


def _outliers(d: Draft, noise: np.ndarray, metric: str) -> None:
    """Label upward heavy-tail noise outliers "don't care" (no detector can tell them from spikes)."""
    # Unit noise, not scaled by var_mult: after a regime change the wider scatter IS the event,
    # and flagging its points one by one as spikes should count against a detector.
    for i in outlier_points(noise):
        d.truth.append(TruthEvent(kind=E.SPIKE_FAST, onset=d.step(i), peak=d.step(i), end=d.step(i + 1),
                                  metric=metric, ignore=True))


def _series(d: Draft, rng: np.random.Generator, model_noise: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-point metric values on the live timeline."""
    out: dict[str, np.ndarray] = {}
    if d.streams:
        for s, f in d.streams.items():
            out[f"loss/{s}"] = f * (d.trend + d.sigma * d.var_mult * model_noise[s]) + d.stream_effect[s]
    else:
        out["loss"] = d.trend + d.effect + d.sigma * d.var_mult * d.noise
    for i in d.nan_points:
        for name in out:
            out[name][i] = float(rng.choice([np.nan, np.inf]))
    grad = d.grad_norm.copy()
    grad[d.grad_nan_points] = np.nan
    out["grad_norm"] = grad
    out["lr"] = d.lr
    if d.loss_scale is not None:
        out["loss_scale"] = d.loss_scale
    return out


def generate(fam: Family, kind: E | str | None, *, seed: int) -> CurveRun:
    """One run of family ``fam`` with one event of ``kind`` (None: a clean run), reproducible from ``seed``.

    Args:
        fam: the curve family.
        kind: the event to inject, or None.
        seed: the seed; the same (family, kind, seed) always gives the same run.

    Returns:
        The run, its rows and its ground truth.
    """
    kind = None if kind is None else E(kind)
    rng = np.random.default_rng(seed)
    d, params = _draft(fam, kind, rng)
    model = NoiseModel(params["noise"])
    stream_noise = {s: sample_noise(model, rng, d.n, level=d.trend) for s in (d.streams or {})}
    if kind is not None:
        INJECTORS[kind](d, rng)
    elif rng.random() < 0.25:
        d.resume = (d.pick(rng, 0.3, 0.8, room=5), int(rng.integers(1, 6)))  # a harmless relaunch
    if d.streams:
        for s, z in stream_noise.items():
            _outliers(d, z, f"loss/{s}")
    else:
        _outliers(d, d.noise, "loss")
    live = _series(d, rng, stream_noise)
    last = d.n - 1 if d.truncate is None else d.truncate
    idx = np.arange(last + 1)
    seg = np.zeros(len(idx), dtype=np.int64)
    rows = {k: v[idx] for k, v in live.items()}
    if d.resume is not None:
        r, dead = d.resume
        dead = min(dead, last - r - 1)
        tail = np.arange(r + 1, r + 1 + dead)
        first = {k: v[tail].copy() for k, v in live.items()}
        for k in first:  # the superseded first pass: same trend, its own noise, no event
            if k == "loss" or k.startswith("loss/"):  # a loss series; not "loss_scale"
                f = d.streams[k.split("/", 1)[1]] if d.streams else 1.0
                first[k] = f * (d.trend[tail] + d.sigma * rng.standard_normal(len(tail)))
        idx = np.concatenate([np.arange(r + 1 + dead), np.arange(r + 1, last + 1)])
        seg = np.concatenate([np.zeros(r + 1 + dead, np.int64), np.ones(last - r, np.int64)])
        rows = {k: np.concatenate([v[:r + 1], first[k], v[r + 1:last + 1]]) for k, v in live.items()}
        params["resume_at"] = d.step(r)
    end_step = d.step(last)
    truth = [e for e in d.truth if e.onset <= end_step]
    truth = [TruthEvent(kind=e.kind, onset=e.onset, peak=min(e.peak, end_step), end=min(e.end, end_step),
                        metric=e.metric, ignore=e.ignore, window=e.window) for e in truth]
    params["family"] = fam.name
    return CurveRun(family=fam.name, seed=seed, kind=kind, steps=d.steps[idx], segment=seg, metrics=rows,
                    truth=truth, log_every=d.every, params=params)
