"""The run being drafted: base curve, event placement and event shapes (see :mod:`.synthetic`).

:class:`RunDraft` holds every array over the logged points while events are injected; the event
methods modify multipliers of the trend (all streams, one stream, the live timeline only, the grad
norm) and append the :class:`TrueEvent` labels. :mod:`.synthetic` turns a draft into a RunLog.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from lossguard import metrics as M
from lossguard.classify.incident import IncidentKind as K
from lossguard.errors import ConfigError

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
        window: for an event without a sharp start, the steps ``(earliest, latest)`` in which a
            claimed onset is right before the scorer's margin is added; None for sharp events.
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
    window: tuple[int, int] | None = None


class RunDraft:
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
        # per-step relative noise, log-uniform 0.4%-4%: real runs measure 0.7-1.2% (Megatron CI),
        # 1.25% (modded-nanogpt AdamW), 2.8% (modded-nanogpt SOAP, last micro-batch loss)
        self.sigma = float(np.exp(rng.uniform(np.log(0.004), np.log(0.04)))) / (math.sqrt(k) if self.averaged else 1.0)
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
        """Index of the first logged step >= ``step`` (clipped to the run)."""
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
        """Logged points kept clear around every event: max(30, 3% of the run)."""
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
        """A loss spike (fast, slow, no-recovery, or on one stream) starting at logged index ``i``.

        The loss rises over 0-2 logged points to ``amp`` x its trend, then decays back (fast: within
        ``FAST_RECOVERY_MAX`` steps, slow: ``SLOW_RECOVERY_MIN`` or more), or only part of the way
        (no recovery: settles 8-30% higher, sometimes then diverges). The grad norm spikes 2.5-30x
        up to 5 steps earlier (labelled ``ignore``).
        """
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
        """A factor rising from 1 at ``i`` to 1.3-3x at the end (power 1-1.8) multiplies the loss."""
        F, p = float(self.rng.uniform(1.3, 3.0)), float(self.rng.uniform(1.0, 1.8))
        x = (self.steps[i:] - self.steps[i]) / max(self.steps[-1] - self.steps[i], 1)
        self.mult[i:] *= 1 + (F - 1) * x ** p
        self.gn_mult[i:] *= (1 + (F - 1) * x ** p) ** 2
        # The label is where the expected loss turns upward (its minimum), which is what "the trend
        # turns upward" means and what can be seen; the multiplier starts earlier, while the
        # power-law decay still outweighs it.
        expected = self.trend[i:] * self.mult[i:]
        turn = int(np.argmin(expected))
        # No sharp start: the cause begins at i, the turn is at the minimum, and the rise becomes
        # visible once the expected loss is 3 noise units (at least 3%) above that minimum.
        up = np.flatnonzero(expected[turn:] > expected[turn] * (1 + max(0.03, 3 * self.sigma)))
        visible = i + turn + (int(up[0]) if len(up) else len(expected) - 1 - turn)
        self.truth.append(TrueEvent(K.DIVERGENCE, M.LOSS, int(self.steps[i + turn]), int(self.steps[-1]), None,
                                    streams=tuple(self.streams), magnitude=F,
                                    note=f"power {p:.2f}, rising factor from step {int(self.steps[i])}",
                                    window=(int(self.steps[i]), int(self.steps[visible]))))

    def level_shift(self, i: int) -> None:
        """The loss steps up by 6-30% (>= 5 noise units) over 1-3 points and stays there."""
        h = float(max(self.rng.uniform(0.06, 0.3), 5 * self.sigma))
        ramp = int(self.rng.integers(1, 4))
        w = np.minimum(np.arange(1, self.n - i + 1) / ramp, 1.0)
        self.mult[i:] *= 1 + h * w
        self.truth.append(TrueEvent(K.LEVEL_SHIFT, M.LOSS, int(self.steps[i]), int(self.steps[min(i + ramp - 1, self.n - 1)]),
                                    None, streams=tuple(self.streams), magnitude=1 + h))

    def sudden_drop(self, i: int, plateau: int) -> None:
        """A flat stretch of ``plateau`` points, then a 15-40% drop within 20-100 steps."""
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
        """NaN loss and grad norm at one point (``single``) or to the end (``terminal``), or an
        Inf grad norm for 1-3 points (``grad_inf``)."""
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
        """The grad norm jumps 4-50x for 1-20 steps; the loss does not move."""
        g = float(max(self.rng.uniform(4, 50), 1 + 10 * self.gn_sigma))
        w = float(self.rng.uniform(1, 20))
        dt = (self.steps[i:] - self.steps[i]).astype(np.float64)
        self.gn_mult[i:] += (g - 1) * np.exp(-dt / max(w / 3, 0.5))
        self.truth.append(TrueEvent(K.GRAD_NORM_SPIKE, M.GRAD_NORM, int(self.steps[i]), int(self.steps[i]),
                                    int(self.steps[self.idx(self.steps[i] + w) + 1]) if i + 2 < self.n else None,
                                    magnitude=g, note="loss unmoved"))

    def resume(self, i: int, overlap: int = 0, first_pass_spike: float = 0.0, note: str = "") -> None:
        """A new segment starts at logged index ``i``; with ``overlap`` > 0 it is a rollback: the
        previous segment had already logged ``overlap`` points from ``i`` on (they become dead)."""
        self.boundaries.append({"index": i, "overlap": overlap, "spike": first_pass_spike, "note": note})

    def resume_spike(self, i: int) -> None:
        """A resume at ``i`` followed by a small (1.08-1.5x) spike that recovers within 50 steps."""
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
        """A resume (or rollback) at ``i`` after which the data restarts: the loss is 4-15% low for
        ``K_pts`` points (memorised batches), then jumps back to the trend."""
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
        """fp16 loss-scale collapse from ``i``: overflows on most steps (see ``_loss_scale``) and
        the model stops learning (the updates are skipped)."""
        self.collapse_at = i
        self.trend[i:] = self.trend[i]   # updates skipped: the model stops learning
