"""Seeded, plausible language-model loss curves with planted events.

The curve lives on the *logged points* of a file (point i is the i-th time the trainer prints its
training loss), so an event's onset is always a step the file itself shows. Shape: a short
warm-up plateau near ln(vocab) ~ 10.5, a fast power-law fall, then a slow cosine-like tail to
~2.5, with multiplicative noise. Planted events are the ones a person reading the log would name:

- SPIKE: +1.5..3 nats at onset, decaying back over ~6 logged points (the run recovers);
- NONFINITE: NaN from onset (the renderer decides how its trainer reports or stops on it);
- DIVERGENCE: from onset the loss climbs to >= 2x its level and stays there;
- LEVEL_SHIFT: the loss jumps up ~1.2 nats at onset and continues its trend from the new level;
- LOSS_SCALE_COLLAPSE: the loss curve is untouched; the renderer makes the fp16 loss scale collapse.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from enum import Enum


class EventKind(str, Enum):
    """Kinds of planted events (the MANIFEST's ``events[].kind`` vocabulary)."""

    SPIKE = "spike"
    NONFINITE = "nonfinite"
    DIVERGENCE = "divergence"
    LEVEL_SHIFT = "level_shift"
    LOSS_SCALE_COLLAPSE = "loss_scale_collapse"


@dataclass(frozen=True)
class Event:
    """One planted event.

    Attributes:
        kind: what happens.
        at: onset as a fraction (0..1) of the logged points; resolved to an index by ``onset``.
    """

    kind: EventKind
    at: float

    def onset(self, n_points: int) -> int:
        """Index of the logged point where the event starts."""
        return max(1, min(n_points - 2, round(self.at * (n_points - 1))))


def base_curve(n: int, rng: random.Random, start: float = 10.5, end: float = 2.5,
               noise: float = 0.015) -> list[float]:
    """Healthy curve of ``n`` logged points: warm-up plateau, fast fall, slow tail, noise."""
    warm = max(2, n // 40)
    out = []
    for i in range(n):
        if i < warm:
            v = start - 0.15 * i / warm
        else:
            t = (i - warm) / max(1, n - warm)
            fast = (start - 0.15 - end - 0.6) * (1.0 + 40.0 * t) ** -1.2
            slow = 0.6 * 0.5 * (1 + math.cos(math.pi * t))
            v = end + fast + slow
        out.append(v * (1.0 + rng.gauss(0.0, noise)))
    return out


def plant(values: list[float], events: tuple[Event, ...], rng: random.Random) -> list[float]:
    """Return a copy of ``values`` with ``events`` applied at their onsets."""
    v = list(values)
    n = len(v)
    for ev in events:
        i0 = ev.onset(n)
        if ev.kind is EventKind.SPIKE:
            height = rng.uniform(1.8, 3.0)
            for k in range(min(8, n - i0)):
                v[i0 + k] += height * (0.6 ** k)
        elif ev.kind is EventKind.NONFINITE:
            for k in range(i0, n):
                v[k] = float("nan")
        elif ev.kind is EventKind.DIVERGENCE:
            level = v[i0 - 1]
            for k in range(i0, n):
                grow = 1.0 + min(1.6, 0.35 * (k - i0 + 1))
                v[k] = level * grow * (1.0 + rng.gauss(0.0, 0.01))
        elif ev.kind is EventKind.LEVEL_SHIFT:
            for k in range(i0, n):
                v[k] += 1.2
    return v


def curve(n: int, seed: int, events: tuple[Event, ...] = ()) -> list[float]:
    """The loss at each of ``n`` logged points, deterministic in ``seed``."""
    rng = random.Random(seed)
    return plant(base_curve(n, rng), events, rng)
