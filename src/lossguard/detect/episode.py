"""Excursions: flagged points of one series grouped into one event with onset, peak and end.

(The detector's unit is an :class:`Excursion`, in point indices of one series; the recovery ladder's
unit, bad *steps* close together, is :class:`lossguard.recovery.Episode` -- one class per concept.)

An episode opens at the first outlier point. Its baseline and noise are *frozen* at onset (the
trailing-median statistics of the point that opened it), so neither a long spike nor a new plateau
can leak into the level the recovery is judged against. The episode then follows the metric:

* it **recovers** once the median of the last ``settle`` points (all after onset) is back inside
  the band ``base +- max(end_z * se, end_rel * |base|)``, where ``se = 1.2533 * noise / sqrt(settle)``
  is the standard error of that median: a smoothed test, so that one lucky point of a noisy run
  that settled higher does not count as a recovery. ``end`` is the middle point of that window,
  and the recovery is ``"fast"`` when ``end - onset <= fast_points`` (points, not steps: Megatron
  logs every 5th step), otherwise ``"slow"``;
* it is closed **unrecovered** (``"none"``) after ``budget_points`` points outside the band, or left
  ``"open"`` when the log ends first.

At closure it records the settled level (median of the last ``tail_points`` values) and whether the
tail was still rising, which the classifier uses to tell a level shift from a spike that never came
back and from one that turned into divergence.

Two paths, proven equal by tests: :func:`find_episodes` searches whole arrays (a numpy scan per
episode, no Python loop per point) and :class:`OnlineEpisodes` is the guard's state machine. Both work
in *finite-point* index space: non-finite values are the business of :mod:`.nonfinite`.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..errors import raise_all


@dataclass(kw_only=True)
class EpisodeConfig:
    """How flagged points are grouped and when an episode counts as recovered."""

    side: str = "up"
    """``"up"`` for spikes (loss, grad norm), ``"down"`` for drops."""
    end_z: float = 3.0
    """Back in band when within this many (frozen) noise units of the frozen baseline..."""
    end_rel: float = 0.01
    """...or within this fraction of |baseline|, whichever is wider."""
    settle: int = 5
    """Points whose median must be back in band to confirm a recovery."""
    fast_points: int = 30
    """A recovery whose end is at most this many points after onset is fast."""
    budget_points: int = 1000
    """Close the episode unrecovered after this many points (slow recoveries are within it)."""
    tail_points: int = 64
    """Points at the end of an unrecovered episode that give its settled level and tail trend."""
    refractory: int = 0
    """After an unrecovered episode, ignore new onsets for this many points (the baseline adapts)."""

    def __post_init__(self) -> None:
        problems = []
        if self.side not in ("up", "down"):
            problems.append(f"side must be 'up' or 'down', got {self.side!r}")
        if not self.end_z > 0:
            problems.append(f"end_z must be > 0, got {self.end_z}")
        if not self.end_rel >= 0:
            problems.append(f"end_rel must be >= 0, got {self.end_rel}")
        if self.settle < 1:
            problems.append(f"settle must be >= 1, got {self.settle}")
        if self.fast_points < 1:
            problems.append(f"fast_points must be >= 1, got {self.fast_points}")
        if self.budget_points <= self.fast_points:
            problems.append(f"budget_points must be > fast_points={self.fast_points}, got {self.budget_points}")
        if self.tail_points < self.settle + 1:
            problems.append(f"tail_points must be >= settle + 1 = {self.settle + 1}, got {self.tail_points}")
        if self.refractory < 0:
            problems.append(f"refractory must be >= 0, got {self.refractory}")
        raise_all(problems)


@dataclass
class Excursion:
    """One excursion of a series away from its baseline (one event), in finite-point indices of the series it
    was found on.

    Attributes:
        onset: index of the first outlier point.
        peak: index of the largest excursion (first one on ties).
        end: index of the middle point of the first in-band median window, or None.
        closed: index of the point at which the episode was closed (decision time online).
        base: frozen pre-event baseline.
        noise: frozen pre-event robust sigma.
        peak_value: value at ``peak``.
        status: ``"fast"``, ``"slow"``, ``"none"`` (budget spent) or ``"open"`` (log ended).
        settled: median of the last ``tail_points`` values up to ``closed`` (unrecovered episodes).
        tail_rise: second-half minus first-half median of that tail, signed toward ``side``.
    """

    onset: int
    peak: int
    end: int | None
    closed: int
    base: float
    noise: float
    peak_value: float
    status: str
    settled: float = float("nan")
    tail_rise: float = float("nan")


def _band(cfg: EpisodeConfig, base: float, noise: float) -> float:
    return max(cfg.end_z * 1.2533 * noise / np.sqrt(cfg.settle), cfg.end_rel * abs(base))


def _tail_stats(tail: np.ndarray, sign: float) -> tuple[float, float]:
    h = len(tail) // 2
    rise = float(np.median(tail[h:]) - np.median(tail[:h])) * sign if h else 0.0
    return float(np.median(tail)), rise


def find_episodes(x: np.ndarray, outlier: np.ndarray, base: np.ndarray, noise: np.ndarray,
                  cfg: EpisodeConfig | None = None) -> list[Excursion]:
    """All episodes of a series of finite points (vectorised twin of :class:`OnlineEpisodes`).

    Args:
        x: finite values in step order.
        outlier: the outlier verdict of each point on ``cfg.side`` (from :func:`.outlier.score`).
        base, noise: the trailing baseline and noise of each point (same source).
    """
    cfg = cfg or EpisodeConfig()
    sign = 1.0 if cfg.side == "up" else -1.0
    m = len(x)
    flagged = np.flatnonzero(outlier)
    episodes: list[Excursion] = []
    free_from = 0  # first index at which a new onset may open
    k = 0
    while True:
        k = int(np.searchsorted(flagged, free_from))
        if k >= len(flagged):
            return episodes
        i = int(flagged[k])
        b, s = float(base[i]), float(noise[i])
        limit = min(m, i + 1 + cfg.budget_points)
        seg = x[i + 1:limit]
        end = None
        if len(seg) >= cfg.settle:
            med = np.median(np.lib.stride_tricks.sliding_window_view(seg, cfg.settle), axis=1)
            hits = np.flatnonzero((med - b) * sign <= _band(cfg, b, s))
            end = int(hits[0]) if len(hits) else None
        if end is not None:
            closed = i + 1 + end + cfg.settle - 1
            end = i + 1 + end + cfg.settle // 2
            span = x[i:end]
            peak = i + int(np.argmax(span * sign))
            status = "fast" if end - i <= cfg.fast_points else "slow"
            ep = Excursion(i, peak, end, closed, b, s, float(x[peak]), status)
            free_from = closed + 1
        else:
            closed = limit - 1
            span = x[i:closed + 1]
            peak = i + int(np.argmax(span * sign))
            status = "none" if i + cfg.budget_points < m else "open"
            tail = x[max(i, closed - cfg.tail_points + 1):closed + 1]
            settled, rise = _tail_stats(tail, sign)
            ep = Excursion(i, peak, None, closed, b, s, float(x[peak]), status, settled, rise)
            free_from = closed + 1 + cfg.refractory
        episodes.append(ep)


@dataclass
class OnlineEpisodes:
    """The episode state machine, one finite point at a time (what the guard runs).

    ``update(value, outlier, base, noise)`` returns the episode that closed at this point, if any.
    Call :meth:`finish` at the end of the log to get an episode still open.
    """

    config: EpisodeConfig = field(default_factory=EpisodeConfig)
    _i: int = field(init=False, default=-1)
    _active: Excursion | None = field(init=False, default=None)
    _tail: deque = field(init=False, repr=False)
    _free_from: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._tail = deque(maxlen=self.config.tail_points)

    @property
    def active(self) -> Excursion | None:
        """The episode in progress (its ``end``/``status`` are not final), or None."""
        return self._active

    def update(self, value: float, outlier: bool, base: float, noise: float) -> Excursion | None:
        """Advance by one finite point; returns the episode closed at this point, if any."""
        cfg = self.config
        sign = 1.0 if cfg.side == "up" else -1.0
        self._i += 1
        i = self._i
        ep = self._active
        if ep is None:
            if outlier and i >= self._free_from:
                self._active = Excursion(i, i, None, i, float(base), float(noise), float(value), "open")
                self._tail.clear()
                self._tail.append(value)
            return None
        self._tail.append(value)
        k = i - ep.onset
        # A recovery found at i puts `end` at i - lag; the peak is the extreme of onset..end-1, so a
        # point is committed to the peak only once it is more than `lag` points old.
        lag = cfg.settle - 1 - cfg.settle // 2
        if k - lag - 1 >= 1:
            self._commit(ep, i - lag - 1, self._tail[-(lag + 2)], sign)
        if k >= cfg.settle:
            last = [self._tail[-j] for j in range(cfg.settle, 0, -1)]
            if (float(np.median(last)) - ep.base) * sign <= _band(cfg, ep.base, ep.noise):
                ep.end = i - lag
                ep.closed = i
                ep.status = "fast" if ep.end - ep.onset <= cfg.fast_points else "slow"
                self._free_from = i + 1
                self._active = None
                return ep
        if k >= cfg.budget_points:
            return self._close_unrecovered(ep, "none")
        return None

    @staticmethod
    def _commit(ep: Excursion, j: int, value: float, sign: float) -> None:
        if (value - ep.peak_value) * sign > 0:
            ep.peak, ep.peak_value = j, float(value)

    def _close_unrecovered(self, ep: Excursion, status: str) -> Excursion:
        """Close ``ep`` (the active episode) without a recovery."""
        cfg = self.config
        sign = 1.0 if cfg.side == "up" else -1.0
        i = self._i
        lag = cfg.settle - 1 - cfg.settle // 2
        for j in range(max(ep.onset + 1, i - lag), i + 1):  # the points not yet committed
            self._commit(ep, j, self._tail[j - i - 1], sign)
        ep.closed = i
        ep.status = status
        ep.settled, ep.tail_rise = _tail_stats(np.asarray(self._tail, dtype=np.float64), sign)
        self._free_from = i + 1 + cfg.refractory
        self._active = None
        return ep

    def finish(self) -> Excursion | None:
        """Close and return the episode still open at the end of the log (status ``"open"``)."""
        return self._close_unrecovered(self._active, "open") if self._active is not None else None
