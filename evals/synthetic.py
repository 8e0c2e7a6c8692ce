"""Synthetic training runs with labelled events: the ground truth that scores lossguard's detectors.

A run is a power-law loss curve driven by the LR schedule (loss = L_inf + A * (tau + t0)^-alpha,
where tau is the cumulative LR in units of the peak LR, so the curve is flat during warm-up and
drops a little faster while the cosine schedule anneals), with multiplicative noise (so the noise
shrinks as the loss falls) plus a rare, capped heavy tail, a grad-norm series correlated with it, an
LR series, optionally an fp16 loss scale with skipped-iteration counts, several ``loss/<stream>``
series, and segments (resumes and rollbacks) written through :class:`~lossguard.runlog.RunLogBuilder`.
Events of every :class:`~lossguard.classify.incident.IncidentKind` are injected with realistic
magnitudes (LLM spikes are 1.2x-3x the trend: the Mixtral CI run 1.19x-2.0x, BLOOM 2.3x) and
labelled as :class:`TrueEvent`.

Labelling decisions (they are the contract the scorer relies on):

* Onsets land on logged steps. ``end`` is the first logged step where the metric is back within
  ``max(0.5 noise, 1%)`` of its trend, or None when it never comes back.
* Fast spikes recover within ``FAST_RECOVERY_MAX`` steps of their peak; slow ones take
  ``SLOW_RECOVERY_MIN`` steps or more. The gap between the two keeps the label unambiguous.
* Single-logged-point data outliers (the modded-nanogpt ``mng_*`` runs: one bad micro-batch, no
  grad-norm reaction, back on the next point) are realistic nuisances, NOT incidents. They are
  labelled ``ignore=True`` ("don't care"): a detector that reports one is not charged a false alarm
  and one that stays silent misses nothing. The same holds for the grad-norm spike that accompanies
  a loss spike (the loss spike is the incident) and for a spike that a later rollback erased from
  the live timeline (the points are dead).
* Every event window is kept clear of every other event, so each label has one right answer.
* Every labelled event is at least 8 noise units for spikes (5 for level shifts and resume spikes,
  4 for repeated data, which lasts 30+ points); the noise's heavy tail is capped at 4.5 units.
* A divergence's onset is where the expected loss turns upward (its minimum), not where the rising
  factor starts while the decay still hides it. A loss-scale collapse begins at its first overflow
  and peaks when the scale reaches its minimum (1).

Variety (drawn per run): 2,000-50,000 steps (log-uniform), logging every 1, 5 or 10 steps (the
logged value is the last one or the interval mean), start loss up to 11 and floor 1.2-3.2, noise
0.4-4% per step (log-uniform), 15% multi-stream runs, 25% fp16 runs, 35% with clean resumes, 12% with a
rollback over a spike, 35% with data outliers. The base run is drawn from its own random streams,
so ``generate_run(None, seed=s)`` is the clean twin of ``generate_run(kind, seed=s)`` (the tests use
this to check every label against the exact injected shape).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from lossguard import metrics as M
from lossguard.classify.incident import IncidentKind as K
from lossguard.errors import ConfigError
from lossguard.runlog import RunLog, RunLogBuilder
from evals.synthetic_events import (FAST_RECOVERY_MAX, SLOW_RECOVERY_MIN, SPIKE_KINDS, STREAM_NAMES,  # noqa: F401
                               TERMINAL_KINDS, RunDraft, TrueEvent)

GENERATED_KINDS = tuple(k for k in K if k not in (K.REGIME_CHANGE, K.STALL, K.UPDATES_STOPPED))
"""The kinds this generator injects (every kind but those added after it: regime change, stall, updates
stopped)."""

__all__ = ["GENERATED_KINDS", "FAST_RECOVERY_MAX", "SLOW_RECOVERY_MIN", "SPIKE_KINDS", "TERMINAL_KINDS", "SyntheticRun",
           "TrueEvent", "generate_run", "generate_suite"]


@dataclass
class SyntheticRun:
    """A generated run and its ground truth.

    Attributes:
        log: the run as a reader would return it (unstitched; one segment per launch).
        truth: the labelled events, in onset order, including ``ignore`` ones.
        params: what was generated (curve, noise, schedule, segments, dead points per metric...).
        seed: the seed that reproduces it.
    """

    log: RunLog
    truth: list[TrueEvent]
    params: dict[str, Any]
    seed: int

    @property
    def events(self) -> list[TrueEvent]:
        """The events a detector must find (``ignore`` labels left out)."""
        return [e for e in self.truth if not e.ignore]

def _kinds(kinds: K | Iterable[K] | None) -> list[K]:
    if kinds is None:
        return []
    items = [kinds] if isinstance(kinds, (K, str)) else list(kinds)
    out, problems = [], []
    for k in items:
        try:
            out.append(K(k))
        except ValueError:
            problems.append(f"kinds: unknown kind {k!r}; use one of {', '.join(x.value for x in K)}")
    problems += [f"kinds: this generator does not inject {k.value!r}" for k in out if k not in GENERATED_KINDS]
    if problems:
        raise ConfigError(problems[0], fix="pass IncidentKind members or their string values "
                                           "(evals.curves generates the newer kinds)")
    if sum(k in TERMINAL_KINDS for k in out) > 1:
        raise ConfigError(f"kinds: at most one of {sorted(k.value for k in TERMINAL_KINDS)} per run, got "
                          f"{[k.value for k in out]}", fix="generate separate runs for them")
    if len(set(out)) != len(out):
        raise ConfigError(f"kinds: each kind at most once per run, got {[k.value for k in out]}",
                          fix="drop the duplicates")
    return out


def generate_run(kinds: K | Sequence[K] | None, *, seed: int, length: int | None = None,
                 log_every: int | None = None, n_streams: int | None = None, fp16: bool | None = None,
                 nuisances: bool = True) -> SyntheticRun:
    """Generate one labelled run.

    Args:
        kinds: the event kinds to inject (each once), or None for a clean run.
        seed: everything random derives from it; the same arguments give the same run.
        length: optimizer steps (default: log-uniform in 2,000-50,000).
        log_every: logging interval in steps (default: 1, 5 or 10).
        n_streams: loss streams of a data mix (default: mostly one; >= 2 for ``STREAM_SPIKE``).
        fp16: write a loss scale and skipped iterations (default: random; always for the collapse).
        nuisances: add the unlabelled realities of real runs: clean resumes, rollbacks that erase a
            spike, single-point data outliers (labelled ``ignore``).

    Returns:
        The run, its labels and its parameters.

    Raises:
        ConfigError: an unknown kind, two terminal kinds, or too few logged points.
    """
    ks = _kinds(kinds)
    r = RunDraft(seed, length, log_every, n_streams, fp16, ks)
    _inject(r, ks, nuisances)
    log, dead = _write(r, seed)
    truth = sorted(r.truth, key=lambda e: (e.onset, e.ignore))
    params = {
        "kinds": [k.value for k in ks], "length": r.T, "log_every": r.k, "points": r.n, "averaged": r.averaged,
        "loss_start": r.L0, "loss_floor": r.L_inf, "alpha": r.alpha, "t0": r.t0, "noise_rel": r.sigma,
        "warmup": r.warmup, "lr_peak": r.lr_peak, "streams": list(r.streams), "fp16": r.fp16,
        "segments": [{"first_step": int(r.steps[b["index"]]), "overlap_points": b["overlap"], "note": b["note"]}
                     for b in sorted(r.boundaries, key=lambda b: b["index"])],
        "dead": dead, "data_outliers": sorted(int(r.steps[i]) for i in r.outliers),
    }
    return SyntheticRun(log=log, truth=truth, params=params, seed=seed)


def _inject(r: RunDraft, ks: list[K], nuisances: bool) -> None:
    rng, mg = r.rng, r.margin()
    order = sorted(ks, key=lambda k: k not in TERMINAL_KINDS)  # terminal first: the others go before it
    upto = None
    for kind in order:
        lone = not any(k in TERMINAL_KINDS for k in ks)
        if kind in TERMINAL_KINDS or (kind == K.NON_FINITE and lone and rng.random() < 0.35):
            lo = 0.07 if kind == K.DIVERGENCE and rng.random() < 0.3 else 0.25  # BLOOM-style early divergence
            if len(ks) > 1:
                lo = 0.55   # leave room for the other events before it
            i = r.place(mg, None, lo=max(lo, (r.warmup / r.T) + 0.03), hi=0.8)
            upto = i - mg
            {K.DIVERGENCE: r.divergence, K.LEVEL_SHIFT: r.level_shift, K.LOSS_SCALE_COLLAPSE: r.collapse,
             K.SPIKE_NO_RECOVERY: lambda j: r.spike(K.SPIKE_NO_RECOVERY, j),
             K.NON_FINITE: lambda j: r.non_finite(j, "terminal")}[kind](i)
            continue
        if kind in (K.SPIKE_FAST, K.SPIKE_SLOW, K.STREAM_SPIKE):
            recover = rng.uniform(SLOW_RECOVERY_MIN, max(SLOW_RECOVERY_MIN + 1, min(1000, 0.2 * r.T))) \
                if kind == K.SPIKE_SLOW else rng.uniform(max(3, r.k), FAST_RECOVERY_MAX)
            i = r.place(mg, mg + 3 + int(recover) // r.k, upto=upto)
            r.spike(kind, i, stream=str(rng.choice(r.streams)) if kind == K.STREAM_SPIKE else None,
                    recover=recover)
        elif kind == K.SUDDEN_DROP:
            plateau = int(r.n * rng.uniform(0.12, 0.25))
            i = r.place(plateau + mg, mg + 100 // r.k, lo=0.4, upto=upto)
            r.sudden_drop(i, plateau)
        elif kind == K.RESUME_SPIKE:
            r.resume_spike(r.place(mg + 60, mg + FAST_RECOVERY_MAX // r.k, upto=upto))
        elif kind == K.REPEATED_DATA:
            K_pts = int(max(30, min(rng.uniform(50, 2000) / r.k, 0.15 * r.n)))
            r.repeated_data(r.place(mg + min(200, r.n // 10), K_pts + mg, upto=upto), K_pts)
        elif kind == K.NON_FINITE:
            i = r.place(mg, mg, upto=upto)
            r.non_finite(i, "grad_inf" if rng.random() < 0.4 else "single")
        elif kind == K.GRAD_NORM_SPIKE:
            r.grad_norm_spike(r.place(mg, mg, upto=upto))
    if not nuisances:
        return
    for _ in range(int(rng.integers(1, 4)) if rng.random() < 0.35 else 0):   # clean resumes
        i = r.try_place(mg, mg, upto=upto)
        if i is not None:
            r.resume(i, note="clean resume")
    if rng.random() < 0.12:   # a spike, rolled back and skipped: gone from the live timeline
        o = int(rng.integers(20, 150))
        i = r.try_place(mg, o + mg, upto=upto)
        if i is not None:
            j = i + o // 2
            r.resume(i, overlap=o, first_pass_spike=float(rng.uniform(1.5, 3.0)), note="rollback over a spike")
            r.truth.append(TrueEvent(K.SPIKE_FAST, M.LOSS, int(r.steps[j]), int(r.steps[j]), None, ignore=True,
                                     note="first pass, superseded by the rollback (dead points)"))
    if rng.random() < 0.35:   # single-point data outliers (modded-nanogpt): not incidents
        for _ in range(int(rng.integers(1, max(2, r.n // 1500) + 2))):
            i = r.try_place(mg // 2, mg // 2, lo=0.05, hi=0.97, upto=upto)
            if i is None:
                continue
            f = float(rng.uniform(1.1, 1.9)) if rng.random() < 0.8 else float(rng.uniform(0.6, 0.85))
            r.outliers[i] = f
            r.truth.append(TrueEvent(K.SPIKE_FAST if f > 1 else K.SUDDEN_DROP, M.LOSS, int(r.steps[i]),
                                     int(r.steps[i]), int(r.steps[min(i + 1, r.n - 1)]), magnitude=f, ignore=True,
                                     note="single-point data outlier"))


def _noise(rng: np.random.Generator, n: int) -> np.ndarray:
    """Standard noise with a rare heavy tail (Student t, 3 dof), capped at 4.5 sigma.

    The cap keeps a gap between noise and the smallest labelled event (8 sigma): real smooth runs
    stay within ~1.04x-1.10x of their rolling median (Megatron GPT-3 15B, modded-nanogpt AdamW), and
    bigger single-point excursions are generated separately as labelled data outliers.
    """
    eps = rng.standard_normal(n)
    heavy = rng.random(n) < 0.01
    eps[heavy] = rng.standard_t(3, int(heavy.sum()))
    return np.clip(eps, -4.5, 4.5)


def _values(r: RunDraft, live: bool) -> dict[str, np.ndarray]:
    """Every metric at every logged step, for the live timeline or for a superseded first pass."""
    rng = np.random.default_rng([r.seed, 2 if live else 3])
    mult = r.mult * (r.live_mult if live else 1.0)
    out: dict[str, np.ndarray] = {}
    eps = _noise(rng, r.n)
    if r.streams:
        total = np.zeros(r.n)
        for s, ws, cs in zip(r.streams, r.stream_w, r.stream_c):
            v = r.trend * cs * mult * r.smult[s] * (1 + r.sigma * math.sqrt(len(r.streams)) * _noise(rng, r.n))
            out[f"{M.LOSS}/{s}"] = np.maximum(v, 0.02 * r.trend)
            total += ws * out[f"{M.LOSS}/{s}"]
        out[M.LOSS] = total
    else:
        out[M.LOSS] = np.maximum(r.trend * mult * (1 + r.sigma * eps), 0.02 * r.trend)
    rho = rng.uniform(0.2, 0.6)
    z = rho * eps + math.sqrt(1 - rho ** 2) * rng.standard_normal(r.n)
    out[M.GRAD_NORM] = r.gn_trend * r.gn_mult * np.exp(r.gn_sigma * z)
    out[M.LR] = r.lr.copy()
    if live:
        for i, f in r.outliers.items():
            for name in out:
                if M.is_loss(name):
                    out[name][i] *= f
        for name in out:
            if M.is_loss(name):
                out[name][r.loss_nan] = np.nan
        bad = ~np.isnan(r.gn_value) | (r.loss_nan & np.isnan(r.gn_value))
        out[M.GRAD_NORM][bad] = r.gn_value[bad]
    return out


def _write(r: RunDraft, seed: int) -> tuple[RunLog, dict[str, list[int]]]:
    live = _values(r, True)
    if r.fp16:
        scale, skipped, bottom = _loss_scale(r)
        live[M.LOSS_SCALE], live[M.SKIPPED_ITERS] = scale, skipped
        if r.collapse_at is not None:
            i = r.collapse_at
            r.gn_keep[i:] = skipped[i:] == 0   # Megatron logs no grad norm for skipped iterations
            peak = int(r.steps[r.idx(bottom)]) if bottom is not None else int(r.steps[-1])
            r.truth.append(TrueEvent(K.LOSS_SCALE_COLLAPSE, M.LOSS_SCALE, int(r.steps[i]), peak, None,
                                     magnitude=float(scale[-1]), note="overflow on most steps"))
    first = _values(r, False) if any(b["overlap"] for b in r.boundaries) else {}
    for name in (M.LOSS_SCALE, M.SKIPPED_ITERS):
        if name in live and first:
            first[name] = live[name]
    b = RunLogBuilder("synthetic", unit="record")
    starts = [0] + sorted(x["index"] for x in r.boundaries)
    by_index = {x["index"]: x for x in r.boundaries}
    dead: dict[str, list[int]] = {}
    for j, lo in enumerate(starts):
        hi = starts[j + 1] if j + 1 < len(starts) else r.n
        nxt = by_index.get(hi, {"overlap": 0, "spike": 0.0})
        o = min(nxt["overlap"], r.n - hi)
        b.start_segment(f"synthetic-{seed}/launch{j}.jsonl", start_time=1.7e9 + 3600.0 * j,
                        note=by_index[lo]["note"] if lo in by_index else "first launch")
        for name, values in live.items():
            keep = r.gn_keep[lo:hi] if name == M.GRAD_NORM else slice(None)
            steps, vals = r.steps[lo:hi][keep], values[lo:hi][keep]
            if o:
                fv = first[name][hi:hi + o].copy()
                if nxt["spike"] and M.is_loss(name):
                    fv *= 1 + (nxt["spike"] - 1) * np.exp(-np.abs(np.arange(o) - o // 2) / 2.0)
                steps, vals = np.concatenate([steps, r.steps[hi:hi + o]]), np.concatenate([vals, fv])
                dead.setdefault(name, []).extend(int(s) for s in r.steps[hi:hi + o])
            b.add(name, steps, vals)
    return b.build(), dead


def generate_suite(n_runs: int, *, seed: int, second_kind: float = 0.2) -> list[SyntheticRun]:
    """``n_runs`` runs covering every kind evenly, with at least 20% clean runs.

    Args:
        n_runs: how many runs.
        seed: the suite seed; run ``i`` uses a seed derived from ``(seed, i)``.
        second_kind: probability that a run with an event gets a second, different one.
    """
    if n_runs < 1:
        raise ConfigError(f"n_runs must be >= 1, got {n_runs}")
    rng = np.random.default_rng([seed, 0xC0FFEE])
    kinds = list(GENERATED_KINDS)
    n_clean = math.ceil(0.2 * n_runs)
    plan: list[list[K]] = [[] for _ in range(n_clean)]
    offset = int(rng.integers(len(kinds)))
    for j in range(n_runs - n_clean):
        ks = [kinds[(j + offset) % len(kinds)]]
        if rng.random() < second_kind:
            other = [k for k in kinds if k not in ks and not (k in TERMINAL_KINDS and ks[0] in TERMINAL_KINDS)]
            ks.append(other[int(rng.integers(len(other)))])
        plan.append(ks)
    rng.shuffle(plan)
    runs = []
    for i, ks in enumerate(plan):
        for attempt in range(20):  # a short run may have no room for two events: draw another
            run_seed = int(np.random.SeedSequence([seed, i, attempt]).generate_state(1)[0])
            try:
                runs.append(generate_run(ks or None, seed=run_seed))
                break
            except ConfigError:
                continue
        else:  # pragma: no cover - 20 short draws in a row
            raise ConfigError(f"could not place {[k.value for k in ks]} in 20 draws", fix="use fewer kinds")
    return runs


def _loss_scale(r: RunDraft) -> tuple[np.ndarray, np.ndarray, int | None]:
    """Dynamic fp16 loss scale at the logged steps, skipped iterations per logging interval, and
    the step the collapse (if any) reaches the minimum scale."""
    rng, T = np.random.default_rng([r.seed, 4]), r.T
    log2 = 32.0 if rng.random() < 0.5 else 16.0            # Megatron starts at 2^32, torch at 2^16
    window = int(rng.choice([1000, 2000]))                  # growth interval (clean steps)
    safe0, drift = rng.uniform(13, 18), rng.uniform(0, 3)
    p_random = 10 ** rng.uniform(-5, -3.7)
    c_on = int(r.steps[r.collapse_at]) if r.collapse_at is not None else T + 1
    p_c = rng.uniform(0.7, 1.0)
    u = rng.random(T + 1)
    random_ovf = np.flatnonzero(u < p_random)
    # Event-driven dynamic loss scaling (halve on overflow, double after `window` clean steps):
    # the events are few (tens), so the loop runs over events, not over steps.
    change_at, change_to, ovf_at = [0], [log2], []
    s = 1
    while s < c_on and s <= T:
        if log2 > safe0 - drift * s / T:
            t_next, up = s, False
        else:
            j = np.searchsorted(random_ovf, s)
            nxt = int(random_ovf[j]) if j < len(random_ovf) else T + 1
            g = s + window - 1
            t_next, up = (g, True) if g < nxt else (nxt, False)
        if t_next >= min(c_on, T + 1):
            break
        log2 = log2 + 1 if up else max(0.0, log2 - 1)
        if not up:
            ovf_at.append(t_next)
        change_at.append(t_next)
        change_to.append(log2)
        s = t_next + 1
    steps = np.arange(T + 1)
    scale = np.asarray(change_to)[np.searchsorted(change_at, steps, side="right") - 1]
    ovf = np.zeros(T + 1, dtype=bool)
    ovf[ovf_at] = True
    bottom = None
    if c_on <= T:  # collapse: overflow on most steps, the scale halves to its minimum and stays
        o = u[c_on:] < p_c
        o[0] = True
        ovf[c_on:] = o
        scale[c_on:] = np.maximum(scale[c_on - 1] - np.cumsum(o), 0.0)
        hit = np.flatnonzero(scale[c_on:] == 0)
        bottom = int(c_on + hit[0]) if len(hit) else None
    scale = 2.0 ** scale
    cum = np.cumsum(ovf)[r.steps]
    skipped = np.diff(np.concatenate([[0], cum])).astype(np.float64)
    return scale[r.steps], skipped, bottom
