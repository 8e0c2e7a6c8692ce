"""A run being generated: the live timeline's arrays that event injectors edit in place."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from evals.curves.truth import TruthEvent


@dataclass(kw_only=True)
class Draft:
    """The mutable state of a run before it is turned into logged rows.

    Attributes:
        steps: logged steps of the live timeline (evenly spaced by ``every``).
        every: steps between logged points.
        trend: the noiseless loss the schedule drives.
        effect: additive change of the loss made by events.
        var_mult: multiplier of the noise spread per point (a regime change raises it).
        noise: unit noise per point (see :mod:`.noise`).
        sigma: the noise spread in loss units.
        grad_norm: the gradient norm per point.
        lr: the learning rate per point.
        loss_scale: the fp16 loss scale per point, or None for a bf16/fp32 run.
        streams: loss stream name -> its scale relative to the mixed loss (a data-mix run), or None.
        stream_effect: stream name -> additive effect on that stream.
        nan_points: indices where the loss is NaN/inf.
        grad_nan_points: indices where the grad norm is NaN.
        truncate: index after which the run logged nothing (it died), or None.
        resume: ``(checkpoint index, points of the superseded tail)`` of a relaunch, or None.
        truth: the ground truth collected so far.
    """

    steps: np.ndarray
    every: int
    trend: np.ndarray
    effect: np.ndarray
    var_mult: np.ndarray
    noise: np.ndarray
    sigma: float
    grad_norm: np.ndarray
    lr: np.ndarray
    loss_scale: np.ndarray | None = None
    streams: dict[str, float] | None = None
    stream_effect: dict[str, np.ndarray] = field(default_factory=dict)
    nan_points: list[int] = field(default_factory=list)
    grad_nan_points: list[int] = field(default_factory=list)
    truncate: int | None = None
    resume: tuple[int, int] | None = None
    truth: list[TruthEvent] = field(default_factory=list)

    @property
    def n(self) -> int:
        """Number of logged points on the live timeline."""
        return len(self.steps)

    def pick(self, rng: np.random.Generator, lo: float, hi: float, *, room: int = 0) -> int:
        """A random index between fractions ``lo`` and ``hi`` of the run, leaving ``room`` points after it."""
        a = max(3, int(lo * self.n))
        b = max(a + 1, min(int(hi * self.n), self.n - 1 - room))
        return int(rng.integers(a, b))

    def step(self, i: int) -> int:
        """The step of index ``i`` (clipped to the run)."""
        return int(self.steps[min(max(i, 0), self.n - 1)])

    def points(self, steps_: float) -> int:
        """How many logged points cover ``steps_`` steps (at least 1)."""
        return max(1, int(round(steps_ / self.every)))

    def height(self, rng: np.random.Generator, i: int, lo: float, hi: float, *, min_sigma: float = 8.0) -> float:
        """An event height: a fraction in ``[lo, hi]`` of the loss at ``i``, at least ``min_sigma`` noise units."""
        level = float(self.trend[i] + self.effect[i])
        return max(level * float(rng.uniform(lo, hi)), min_sigma * self.sigma * float(self.var_mult[i]))
