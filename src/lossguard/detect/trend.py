"""Divergence without a spike: the robust baseline turns upward and keeps rising.

The detector watches the trailing median (the ``baseline`` of :mod:`.outlier`, which a spike
shorter than half its window cannot move) against its own running minimum. Divergence is declared
when the baseline has risen above that minimum by ``rise_z`` noise units (the noise measured where
the minimum was) *and* by ``rise_rel`` of the minimum's magnitude: a sustained, not a momentary,
climb. This catches the early divergences of BLOOM's 104B attempts (the loss falls, bottoms out,
then climbs) as well as late ones, and a run that is merely flattening never triggers it.

The onset is placed at the turn: the last point before the trigger where the baseline was still
near its minimum (within ``near_fraction`` of the threshold). The event ends when the
baseline falls back below the minimum plus half the threshold (None if it never does); the running
minimum then restarts. Online (:class:`OnlineTrend`) and vectorised (:func:`find_divergences`)
paths give the same events.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import raise_all


@dataclass(kw_only=True)
class TrendConfig:
    """Thresholds of the divergence test."""

    rise_z: float = 5.0
    """Rise of the baseline above its running minimum, in noise units at the minimum."""
    rise_rel: float = 0.05
    """...and as a fraction of |minimum|."""
    near_fraction: float = 0.0
    """The onset is the last point before the trigger where the baseline was within this fraction of
    the threshold of its minimum: on a plateau the minimum itself is wherever the noise put it,
    the turn is where the baseline leaves the plateau for good."""
    lag_points: int = 0
    """Move the onset this many points before the baseline's minimum. A trailing median lags the curve
    by half its window, but a divergence that starts gently is hidden by the still-falling trend for
    about as long, so by default the two cancel and the onset is the minimum itself."""

    def __post_init__(self) -> None:
        problems = []
        if not self.rise_z > 0:
            problems.append(f"rise_z must be > 0, got {self.rise_z}")
        if not self.rise_rel >= 0:
            problems.append(f"rise_rel must be >= 0, got {self.rise_rel}")
        if not 0 <= self.near_fraction < 1:
            problems.append(f"near_fraction must be in [0, 1), got {self.near_fraction}")
        if self.lag_points < 0:
            problems.append(f"lag_points must be >= 0, got {self.lag_points}")
        raise_all(problems)


@dataclass
class Divergence:
    """A sustained climb of the baseline, in finite-point indices.

    Attributes:
        onset: estimated turn: the last point before the trigger with the baseline near its minimum.
        minimum_at: index where the baseline was lowest before the climb.
        trigger: index at which the climb crossed the threshold (decision time online).
        end: index where the baseline came back down, or None.
        minimum: baseline at its minimum.
        noise: robust sigma at the minimum.
        threshold: rise that was required.
    """

    onset: int
    minimum_at: int
    trigger: int
    end: int | None
    minimum: float
    noise: float
    threshold: float


def _threshold(cfg: TrendConfig, minimum: float, noise: float) -> float:
    return max(cfg.rise_z * noise, cfg.rise_rel * abs(minimum))


def find_divergences(base: np.ndarray, noise: np.ndarray, cfg: TrendConfig | None = None) -> list[Divergence]:
    """Vectorised twin of :class:`OnlineTrend` over per-point baselines (NaN = no verdict yet).

    The baseline is piecewise constant (it is refreshed every few points), so the search runs on the
    runs of equal (baseline, noise) and maps back to the first point of each run: the state machine
    can only change its mind where its input changes.
    """
    cfg = cfg or TrendConfig()
    m = len(base)
    valid_all = np.isfinite(base) & np.isfinite(noise)
    out: list[Divergence] = []
    start = int(np.argmax(valid_all)) if valid_all.any() else m
    while start < m:
        bs, ns = base[start:], noise[start:]
        change = np.ones(len(bs), dtype=bool)
        change[1:] = (bs[1:] != bs[:-1]) | (ns[1:] != ns[:-1])
        first = np.flatnonzero(change)              # run starts, relative to `start`
        valid = valid_all[start:][first]
        b = np.where(valid, bs[first], np.inf)
        nzr = ns[first]
        runmin = np.minimum.accumulate(b)
        new_min = np.concatenate([[True], b[1:] < runmin[:-1]])
        at = np.maximum.accumulate(np.where(new_min, np.arange(len(b)), 0))
        nz = nzr[at]
        thr = np.maximum(cfg.rise_z * nz, cfg.rise_rel * np.abs(runmin))
        # A threshold of zero is no test (a loss stuck at exactly 0.0 has zero noise and zero level).
        hit = np.flatnonzero(valid & (thr > 0) & (b - runmin >= thr))
        if not len(hit):
            return out
        t = int(hit[0])
        j = int(at[t])
        minimum, sig, th = float(runmin[t]), float(nzr[j]), float(thr[t])
        near = j + int(np.flatnonzero(b[j:t] <= minimum + cfg.near_fraction * th)[-1])
        turn = start + int(first[near + 1]) - 1    # the last point of that run
        after = b[t + 1:]
        back = np.flatnonzero(np.isfinite(after) & (after < minimum + th / 2))
        end = start + int(first[t + 1 + int(back[0])]) if len(back) else None
        j_pt = start + int(first[j])
        out.append(Divergence(max(0, turn - cfg.lag_points), j_pt, start + int(first[t]), end, minimum, sig, th))
        if end is None:
            return out
        start = end + 1
        while start < m and not valid_all[start]:
            start += 1
    return out


@dataclass
class OnlineTrend:
    """Divergence state machine over (baseline, noise) pairs, one per finite point.

    ``update(base, noise)`` returns a :class:`Divergence` when one is declared (``end`` still None)
    and the same object again, with ``end`` set, when the baseline comes back.
    """

    config: TrendConfig = field(default_factory=TrendConfig)
    _i: int = field(init=False, default=-1)
    _min: float = field(init=False, default=float("inf"))
    _min_at: int = field(init=False, default=-1)
    _min_noise: float = field(init=False, default=float("nan"))
    _near: int = field(init=False, default=0)
    _active: Divergence | None = field(init=False, default=None)
    _started: bool = field(init=False, default=False)

    def update(self, base: float, noise: float) -> Divergence | None:
        """Advance by one finite point."""
        self._i += 1
        i = self._i
        if not (math.isfinite(base) and math.isfinite(noise)):
            return None
        if self._active is not None:
            d = self._active
            if base < d.minimum + d.threshold / 2:
                d.end = i
                self._active = None
                self._min, self._started = float("inf"), False
                return d
            return None
        if not self._started or base < self._min:
            self._min, self._min_at, self._min_noise, self._started = float(base), i, float(noise), True
        th = _threshold(self.config, self._min, self._min_noise)
        if th > 0 and base - self._min >= th:  # a zero threshold (a loss stuck at 0.0) is no test
            self._active = Divergence(max(0, self._near - self.config.lag_points), self._min_at, i, None,
                                      self._min, self._min_noise, th)
            return self._active
        if base <= self._min + self.config.near_fraction * th:
            self._near = i
        return None
