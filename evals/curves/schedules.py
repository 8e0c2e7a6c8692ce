"""Learning-rate schedules and the loss curve they drive.

The loss follows a power law in the *area under the learning rate* (the optimiser's distance
travelled), decaying toward an irreducible floor, plus an annealing bonus while the LR is below its
peak (the drop every WSD cool-down shows). This is the shape described by Tissue et al. 2024,
"Scaling Law with Learning Rate Annealing"; it makes the curve depend on the schedule the way real
runs do (a restart bumps the loss up, a cool-down makes it fall faster).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np


class Schedule(str, Enum):
    """The learning-rate schedule of a generated run."""

    COSINE = "cosine"
    """Warm-up then cosine decay to 10% of the peak."""
    WSD = "wsd"
    """Warm-up, stable, then a linear decay over the last 10-20% (warmup-stable-decay)."""
    CONSTANT = "constant"
    """Warm-up then constant."""
    LINEAR = "linear"
    """Warm-up then linear decay to zero."""
    COSINE_RESTARTS = "cosine_restarts"
    """Cosine with warm restarts (SGDR): 2-4 cycles, the LR jumping back to the peak."""


@dataclass(frozen=True, kw_only=True)
class CurveShape:
    """The noiseless loss curve's constants.

    Attributes:
        floor: the irreducible loss the curve tends to.
        amplitude: how far above the floor the run starts.
        exponent: power-law exponent of the decay in LR area.
        anneal: size of the annealing bonus (in units of ``amplitude``).
        warmup_frac: fraction of the run spent warming up the LR.
    """

    floor: float
    amplitude: float
    exponent: float
    anneal: float
    warmup_frac: float

    def __post_init__(self) -> None:
        for name in ("floor", "amplitude", "exponent"):
            if not getattr(self, name) > 0:
                raise ValueError(f"CurveShape.{name} must be > 0, got {getattr(self, name)}")
        if not 0 <= self.warmup_frac < 0.5:
            raise ValueError(f"CurveShape.warmup_frac must be in [0, 0.5), got {self.warmup_frac}")
        if self.anneal < 0:
            raise ValueError(f"CurveShape.anneal must be >= 0, got {self.anneal}")


def random_shape(rng: np.random.Generator) -> CurveShape:
    """Draw plausible curve constants (LM losses between ~1.5 and ~11)."""
    return CurveShape(floor=float(rng.uniform(1.5, 3.5)), amplitude=float(rng.uniform(2.0, 7.0)),
                      exponent=float(rng.uniform(0.3, 0.7)), anneal=float(rng.uniform(0.02, 0.08)),
                      warmup_frac=float(rng.uniform(0.0, 0.05)))


def lr_curve(schedule: Schedule, steps: np.ndarray, total: int, *, warmup: int,
             rng: np.random.Generator) -> np.ndarray:
    """The learning rate (relative to its peak, so in [0, 1]) at each step in ``steps``."""
    t = np.asarray(steps, float)
    warm = np.clip((t + 1) / max(warmup, 1), 0, 1) if warmup > 0 else np.ones_like(t)
    x = np.clip((t - warmup) / max(total - warmup, 1), 0, 1)
    if schedule is Schedule.COSINE:
        body = 0.1 + 0.45 * (1 + np.cos(np.pi * x))
    elif schedule is Schedule.WSD:
        decay_from = 1 - rng.uniform(0.1, 0.2)
        body = np.where(x < decay_from, 1.0, 1 - (x - decay_from) / (1 - decay_from) * 0.99)
    elif schedule is Schedule.CONSTANT:
        body = np.ones_like(x)
    elif schedule is Schedule.LINEAR:
        body = 1 - 0.99 * x
    elif schedule is Schedule.COSINE_RESTARTS:
        cycles = int(rng.integers(2, 5))
        phase = (x * cycles) % 1.0
        body = 0.05 + 0.475 * (1 + np.cos(np.pi * phase))
    else:
        raise ValueError(f"unknown schedule {schedule!r}")
    return warm * body


def loss_curve(shape: CurveShape, steps: np.ndarray, lr: np.ndarray, *, warmup: int) -> np.ndarray:
    """The noiseless loss at the logged ``steps`` given the LR there (``warmup`` in steps).

    The LR area is integrated with the trapezoid rule over the logged points (their spacing is
    even), normalised so the whole run travels an area of 1000 "peak-LR steps".
    """
    steps = np.asarray(steps, float)
    dt = np.diff(steps, prepend=steps[0] - (steps[1] - steps[0] if len(steps) > 1 else 1))
    area = np.cumsum(lr * dt)
    area = area / max(area[-1], 1e-12) * 1000.0
    decay = shape.amplitude * (1 + area) ** (-shape.exponent)
    # The bonus comes from the LR falling below its peak, not from the warm-up ramp below it.
    below_peak = np.where(steps >= warmup, 1 - lr, 0.0)
    bonus = shape.anneal * shape.amplitude * below_peak * (1 + area) ** (-0.2)
    return shape.floor + decay - bonus
