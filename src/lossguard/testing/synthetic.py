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
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from .. import metrics as M
from ..classify.incident import IncidentKind as K
from ..errors import ConfigError
from ..runlog import RunLog, RunLogBuilder

FAST_RECOVERY_MAX = 50
"""Steps from peak to recovery, at most, for a fast spike."""
SLOW_RECOVERY_MIN = 150
"""Steps from peak to recovery, at least, for a slow spike."""
SPIKE_KINDS = frozenset({K.SPIKE_FAST, K.SPIKE_SLOW, K.SPIKE_NO_RECOVERY, K.RESUME_SPIKE, K.STREAM_SPIKE})
"""Loss-spike kinds: the "spike" umbrella of the scorer (grad-norm spikes are not loss spikes)."""
TERMINAL_KINDS = frozenset({K.DIVERGENCE, K.SPIKE_NO_RECOVERY, K.LEVEL_SHIFT, K.LOSS_SCALE_COLLAPSE})
"""Kinds that change the run until its end; a run holds at most one, placed after the others."""
STREAM_NAMES = ("web", "code", "books", "arxiv", "wiki", "math", "cm4", "reddit")


@dataclass(frozen=True)
class TrueEvent:
    """One labelled event of a synthetic run.

    Attributes:
        kind: what happened.
        metric: the metric it shows on (``loss``, ``loss/code``, ``grad_norm``...).
        onset: first logged step of the episode.
        peak: logged step of the largest excursion.
        end: first logged step back on the trend, or None when it never is.
        streams: the loss streams involved (empty in single-stream runs).
        magnitude: peak / trend (>1 up, <1 down); for the loss-scale collapse, the final scale.
        ignore: a "don't care" label (see the module docstring): neither a hit nor a miss.
        note: the variant generated, in words.
    """

    kind: K
    metric: str
    onset: int
    peak: int
    end: int | None
    streams: tuple[str, ...] = ()
    magnitude: float = float("nan")
    ignore: bool = False
    note: str = ""


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
    if problems:
        raise ConfigError(problems[0], fix="pass IncidentKind members or their string values")
    if sum(k in TERMINAL_KINDS for k in out) > 1:
        raise ConfigError(f"kinds: at most one of {sorted(k.value for k in TERMINAL_KINDS)} per run, got "
                          f"{[k.value for k in out]}", fix="generate separate runs for them")
    if len(set(out)) != len(out):
        raise ConfigError(f"kinds: each kind at most once per run, got {[k.value for k in out]}",
                          fix="drop the duplicates")
    return out


class _Run:
    """The state of one run being generated (arrays over logged points)."""

    def __init__(self, seed: int, length: int | None, log_every: int | None,
                 n_streams: int | None, fp16: bool | None, kinds: list[K]) -> None:
        # Separate random streams: the base run (curve, noise levels, schedule) and its noise do
        # not depend on which events are injected, so generate_run(None, seed=s) is the clean
        # twin of generate_run(kind, seed=s) (same streams and fp16 choice permitting).
        self.seed = seed
        rng = np.random.default_rng([seed, 0])
        self.rng = np.random.default_rng([seed, 1])
        self.T = T = int(length if length is not None else round(math.exp(rng.uniform(math.log(2000), math.log(50000)))))
        k_draw = int(rng.choice([1, 5, 10], p=[0.4, 0.35, 0.25]))
        k = int(log_every if log_every is not None else k_draw)
        while log_every is None and k > 1 and T // k < 400:
            k = {10: 5, 5: 1}[k]  # keep at least ~400 points: baselines need a history
        self.k = k
        self.steps = np.arange(k, T + 1, k, dtype=np.int64)
        self.n = n = len(self.steps)
        if n < 100:
            raise ConfigError(f"length/log_every gives {n} logged points; at least 100 are needed",
                              fix="raise length or lower log_every")
        u_streams, n_draw, u_fp16 = rng.random(), int(rng.integers(2, 5)), rng.random()
        names = [str(x) for x in rng.permutation(STREAM_NAMES)]
        multi = K.STREAM_SPIKE in kinds or (n_streams or 0) > 1 or (n_streams is None and u_streams < 0.15)
        self.streams = names[:max(n_streams or 0, n_draw)] if multi else []
        self.fp16 = bool(fp16) if fp16 is not None else u_fp16 < 0.25
        if K.LOSS_SCALE_COLLAPSE in kinds:
            self.fp16 = True
        self.stream_w = rng.dirichlet(np.full(max(len(self.streams), 1), 4.0))
        c = rng.uniform(0.7, 1.4, max(len(self.streams), 1))
        self.stream_c = c / float(self.stream_w @ c)   # stream levels whose weighted mean is the trend
        # Schedule: linear warm-up to the peak, cosine to 10% of it (per optimizer step).
        self.warmup = int(rng.uniform(0.0, 0.04) * T)
        self.lr_peak = float(10 ** rng.uniform(-4.3, -2.7))
        s = np.arange(0, T + 1, dtype=np.float64)
        prog = np.clip((s - self.warmup) / max(T - self.warmup, 1), 0, 1)
        lr = np.where(s < self.warmup, (s + 1) / (self.warmup + 1), 0.1 + 0.45 * (1 + np.cos(np.pi * prog)))
        self.lr = lr[self.steps] * self.lr_peak
        tau = np.cumsum(lr)[self.steps]
        self.L_inf = float(rng.uniform(1.2, 3.2))
        self.L0 = float(rng.uniform(self.L_inf + 1.5, 11.0))
        self.alpha = float(rng.uniform(0.3, 0.7))
        self.t0 = float(rng.uniform(20, 300))
        A = (self.L0 - self.L_inf) * self.t0 ** self.alpha
        self.trend = self.L_inf + A * (tau + self.t0) ** -self.alpha
        self.averaged = bool(k > 1 and rng.random() < 0.5)  # mean over the interval vs last value
        self.sigma = float(rng.uniform(0.004, 0.025)) / (math.sqrt(k) if self.averaged else 1.0)
        self.mult = np.ones(n)                       # events on every stream (live and first pass)
        self.live_mult = np.ones(n)                  # resume effects: live timeline only
        self.smult = {s: np.ones(n) for s in self.streams}
        g_inf = 10 ** rng.uniform(-0.8, 0.3)
        self.gn_trend = g_inf * (1 + rng.uniform(1, 8) * np.exp(-self.steps / (0.03 * T))) \
            * (1 + rng.uniform(-0.3, 1.0) * self.steps / T)
        self.gn_mult = np.ones(n)
        self.gn_sigma = float(rng.uniform(0.04, 0.2))
        self.gn_keep = np.ones(n, dtype=bool)
        self.loss_nan = np.zeros(n, dtype=bool)
        self.gn_value = np.full(n, np.nan)           # non-finite overrides of the grad norm
        self.outliers: dict[int, float] = {}
        self.truth: list[TrueEvent] = []
        self.busy: list[tuple[int, int]] = []        # logged-index intervals already used
        self.boundaries: list[dict[str, Any]] = []   # segment starts: index, overlap, first-pass spike
        self.collapse_at: int | None = None

    # ---- placement -------------------------------------------------------------------------
    def idx(self, step: float) -> int:
        return int(np.clip(np.searchsorted(self.steps, step), 0, self.n - 1))

    def place(self, pre: int, post: int | None, lo: float = 0.2, hi: float = 0.85,
              upto: int | None = None) -> int:
        """A free logged index i with [i - pre, i + post] clear (post None: to the end of the run).

        Raises:
            ConfigError: no room left (the run is too short for what was asked).
        """
        top = min(int(hi * self.n), (upto if upto is not None else self.n) - (post or 0) - 1)
        bottom = max(int(lo * self.n), pre)
        for _ in range(60 if top > bottom else 0):
            i = int(self.rng.integers(bottom, top))
            right = self.n if post is None else i + post
            if all(right < a or i - pre > b for a, b in self.busy):
                self.busy.append((i - pre, right))
                return i
        raise ConfigError(f"no room left for another event in {self.n} logged points",
                          fix="raise length, lower log_every or ask for fewer kinds")

    def try_place(self, *args: Any, **kw: Any) -> int | None:
        """:meth:`place`, or None when there is no room (for optional nuisances)."""
        try:
            return self.place(*args, **kw)
        except ConfigError:
            return None

    def margin(self) -> int:
        return max(30, int(0.03 * self.n))

    def thr(self, i: int) -> float:
        """Relative excursion below which a point counts as back on its trend."""
        return max(0.5 * self.sigma, 0.01)

    def decay(self, i0: int, amp: float, steps_to_recover: float) -> tuple[np.ndarray, int | None]:
        """Exponential excess ``amp * exp(-(t - t0)/tau)`` from index i0 on, tau set so that it
        falls below the recovery threshold ``steps_to_recover`` steps after the peak."""
        tau = steps_to_recover / math.log(max(amp / self.thr(i0), 1.0001))
        dt = (self.steps[i0:] - self.steps[i0]).astype(np.float64)
        shape = amp * np.exp(-dt / tau)
        back = np.flatnonzero(shape < self.thr(i0))
        return shape, (int(self.steps[i0 + back[0]]) if len(back) else None)

    def gn_bump(self, i_loss: int, factor: float, length_steps: float, lead_steps: int = 0) -> None:
        """Grad-norm excursion that leads the loss by ``lead_steps`` (labelled ``ignore``)."""
        i = self.idx(self.steps[i_loss] - lead_steps)
        dt = (self.steps[i:] - self.steps[i]).astype(np.float64)
        self.gn_mult[i:] += (factor - 1) * np.exp(-dt / max(length_steps / 3, 1.0))
        self.truth.append(TrueEvent(K.GRAD_NORM_SPIKE, M.GRAD_NORM, int(self.steps[i]), int(self.steps[i]),
                                    None, magnitude=factor, ignore=True, note="accompanies a loss event"))

    # ---- events ----------------------------------------------------------------------------
    def spike(self, kind: K, i: int, stream: str | None = None, amp: float | None = None,
              recover: float | None = None) -> None:
        rng, k = self.rng, self.k
        m = amp if amp is not None else float(max(rng.uniform(1.2, 3.0), 1 + 8 * self.sigma))
        rise = int(rng.integers(0, 3)) if k == 1 else int(rng.integers(0, 2))
        ip = min(i + rise, self.n - 2)
        if recover is None:
            recover = rng.uniform(max(3, k), FAST_RECOVERY_MAX) if kind != K.SPIKE_SLOW \
                else rng.uniform(SLOW_RECOVERY_MIN, 1000)
        target = self.smult[stream] if stream else self.mult
        end: int | None
        if kind == K.SPIKE_NO_RECOVERY:
            h = float(rng.uniform(0.08, min(0.3, (m - 1) / 2)))
            shape, _ = self.decay(ip, m - 1 - h, rng.uniform(20, 300))
            shape = shape + h
            note = "settles higher"
            if rng.random() < 0.3:   # ...or turns into divergence after its partial recovery
                dt = (self.steps[ip:] - self.steps[ip]) / max(self.steps[-1] - self.steps[ip], 1)
                shape = shape + rng.uniform(0.3, 1.0) * dt ** 1.5
                note = "partial recovery, then divergence"
            end = None
        else:
            shape, end = self.decay(ip, m - 1, recover)
            note = f"recovers in ~{int(recover)} steps"
        target[ip:] += shape
        for j in range(i, ip):  # linear rise over the logged points before the peak
            target[j] += (m - 1) * (j - i + 1) / (rise + 1)
        metric = f"{M.LOSS}/{stream}" if stream else M.LOSS
        self.truth.append(TrueEvent(kind, metric, int(self.steps[i]), int(self.steps[ip]), end,
                                    streams=(stream,) if stream else tuple(self.streams), magnitude=m, note=note))
        if kind != K.STREAM_SPIKE or rng.random() < 0.5:
            self.gn_bump(i, float(rng.uniform(2.5, 30)), max(recover, 3 * k), int(rng.integers(0, 6)))

    def divergence(self, i: int) -> None:
        F, p = float(self.rng.uniform(1.3, 3.0)), float(self.rng.uniform(1.0, 1.8))
        x = (self.steps[i:] - self.steps[i]) / max(self.steps[-1] - self.steps[i], 1)
        self.mult[i:] *= 1 + (F - 1) * x ** p
        self.gn_mult[i:] *= (1 + (F - 1) * x ** p) ** 2
        self.truth.append(TrueEvent(K.DIVERGENCE, M.LOSS, int(self.steps[i]), int(self.steps[-1]), None,
                                    streams=tuple(self.streams), magnitude=F, note=f"power {p:.2f}"))

    def level_shift(self, i: int) -> None:
        h = float(max(self.rng.uniform(0.06, 0.3), 5 * self.sigma))
        ramp = int(self.rng.integers(1, 4))
        w = np.minimum(np.arange(1, self.n - i + 1) / ramp, 1.0)
        self.mult[i:] *= 1 + h * w
        self.truth.append(TrueEvent(K.LEVEL_SHIFT, M.LOSS, int(self.steps[i]), int(self.steps[min(i + ramp - 1, self.n - 1)]),
                                    None, streams=tuple(self.streams), magnitude=1 + h))

    def sudden_drop(self, i: int, plateau: int) -> None:
        rng = self.rng
        d = float(rng.uniform(0.15, 0.4))
        w_steps = float(rng.uniform(20, 100))
        ps = i - plateau
        P = self.trend[ps]
        frac = (np.arange(plateau) / plateau)
        self.trend[ps:i] = P * (1 - 0.01 * frac)                           # the long slow stretch
        self.trend[i:] = self.trend[i:] * (0.99 * P / self.trend[i])        # then the old shape again
        x = np.clip((self.steps[i:] - self.steps[i]) / w_steps, 0, 1)
        self.mult[i:] *= 1 - d * (3 * x ** 2 - 2 * x ** 3)                 # smoothstep down by d
        j = self.idx(self.steps[i] + w_steps)
        self.truth.append(TrueEvent(K.SUDDEN_DROP, M.LOSS, int(self.steps[i]), int(self.steps[j]), int(self.steps[j]),
                                    streams=tuple(self.streams), magnitude=1 - d,
                                    note=f"drop over {int(w_steps)} steps after {plateau} flat points"))
        self.gn_bump(i, float(rng.uniform(1.5, 3)), w_steps)

    def non_finite(self, i: int, variant: str) -> None:
        if variant == "terminal":
            self.loss_nan[i:] = True
            self.gn_value[i:] = np.nan
            metric, end = M.LOSS, None
        elif variant == "grad_inf":
            w = int(self.rng.integers(1, 4))
            self.gn_value[i:i + w] = np.inf
            metric, end = M.GRAD_NORM, int(self.steps[min(i + w, self.n - 1)])
        else:
            self.loss_nan[i] = True
            self.gn_value[i] = np.nan
            metric, end = M.LOSS, int(self.steps[i + 1])
        self.truth.append(TrueEvent(K.NON_FINITE, metric, int(self.steps[i]), int(self.steps[i]), end,
                                    streams=tuple(self.streams) if metric == M.LOSS else (), note=variant))

    def grad_norm_spike(self, i: int) -> None:
        g = float(max(self.rng.uniform(4, 50), 1 + 10 * self.gn_sigma))
        w = float(self.rng.uniform(1, 20))
        dt = (self.steps[i:] - self.steps[i]).astype(np.float64)
        self.gn_mult[i:] += (g - 1) * np.exp(-dt / max(w / 3, 0.5))
        self.truth.append(TrueEvent(K.GRAD_NORM_SPIKE, M.GRAD_NORM, int(self.steps[i]), int(self.steps[i]),
                                    int(self.steps[self.idx(self.steps[i] + w) + 1]) if i + 2 < self.n else None,
                                    magnitude=g, note="loss unmoved"))

    def resume(self, i: int, overlap: int = 0, first_pass_spike: float = 0.0, note: str = "") -> None:
        self.boundaries.append({"index": i, "overlap": overlap, "spike": first_pass_spike, "note": note})

    def resume_spike(self, i: int) -> None:
        rng = self.rng
        m = float(max(rng.uniform(1.08, 1.5), 1 + 6 * self.sigma))
        shape, end = self.decay(i, m - 1, rng.uniform(max(3, self.k), FAST_RECOVERY_MAX))
        self.live_mult[i:] += shape
        self.resume(i, overlap=int(rng.integers(5, self.margin())) if rng.random() < 0.3 else 0,
                    note="resume spike")
        self.truth.append(TrueEvent(K.RESUME_SPIKE, M.LOSS, int(self.steps[i]), int(self.steps[i]), end,
                                    streams=tuple(self.streams), magnitude=m))
        self.gn_bump(i, float(rng.uniform(1.5, 4)), FAST_RECOVERY_MAX)

    def repeated_data(self, i: int, K_pts: int) -> None:
        d = float(max(self.rng.uniform(0.04, 0.15), 4 * self.sigma))
        ramp = np.minimum(0.6 + 0.4 * np.arange(K_pts) / max(1, min(K_pts - 1, 10)), 1.0)
        self.live_mult[i:i + K_pts] *= 1 - d * ramp
        rollback = self.rng.random() < 0.5
        self.resume(i, overlap=int(min(K_pts, self.rng.integers(10, 200))) if rollback else 0,
                    note="data stream restarted")
        peak = min(i + 10, i + K_pts - 1)
        self.truth.append(TrueEvent(K.REPEATED_DATA, M.LOSS, int(self.steps[i]), int(self.steps[peak]),
                                    int(self.steps[i + K_pts]), streams=tuple(self.streams), magnitude=1 - d,
                                    note=f"{K_pts} points of replayed data" + (" after a rollback" if rollback else "")))

    def collapse(self, i: int) -> None:
        self.collapse_at = i
        self.trend[i:] = self.trend[i]   # updates skipped: the model stops learning

    # ---- fp16 loss scale ---------------------------------------------------------------------
    def loss_scale(self) -> tuple[np.ndarray, np.ndarray, int | None]:
        rng, T = np.random.default_rng([self.seed, 4]), self.T
        log2 = 32.0 if rng.random() < 0.5 else 16.0            # Megatron starts at 2^32, torch at 2^16
        window = int(rng.choice([1000, 2000]))                  # growth interval (clean steps)
        safe0, drift = rng.uniform(13, 18), rng.uniform(0, 3)
        p_random = 10 ** rng.uniform(-5, -3.7)
        c_on = int(self.steps[self.collapse_at]) if self.collapse_at is not None else T + 1
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
                r = int(random_ovf[j]) if j < len(random_ovf) else T + 1
                g = s + window - 1
                t_next, up = (g, True) if g < r else (r, False)
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
        cum = np.cumsum(ovf)[self.steps]
        skipped = np.diff(np.concatenate([[0], cum])).astype(np.float64)
        return scale[self.steps], skipped, bottom


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
    r = _Run(seed, length, log_every, n_streams, fp16, ks)
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


def _inject(r: _Run, ks: list[K], nuisances: bool) -> None:
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


def _values(r: _Run, live: bool) -> dict[str, np.ndarray]:
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


def _write(r: _Run, seed: int) -> tuple[RunLog, dict[str, list[int]]]:
    live = _values(r, True)
    if r.fp16:
        scale, skipped, bottom = r.loss_scale()
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
    kinds = list(K)
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
