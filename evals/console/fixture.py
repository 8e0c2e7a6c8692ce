"""A fixture's plan (``Spec``), the run it renders (``Run``) and its MANIFEST entry.

A renderer receives a ``Run`` and returns the text of the log. Every time it prints the training
loss it goes through ``Run.show`` (or ``Run.crash`` for a trainer that dies on a NaN), so the
MANIFEST's steps, spot values and event steps are taken from what the file really shows, not
from the plan.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from evals.console.curve import Event, EventKind, curve


@dataclass(frozen=True)
class Spec:
    """Plan of one fixture file."""

    file: str
    """file name under tests/data/console/"""
    writer: str
    """trainer / tool name (one per distinct tool)"""
    source: str
    """repository + path + commit of the format strings reproduced"""
    step_key: str
    """the counter a person calls the step (MANIFEST step_key)"""
    loss_key: str
    """the printed label of the training loss (MANIFEST loss_key)"""
    render: Callable[[Run], str]
    """renders the whole file"""
    points: int = 400
    """number of logged training-loss points planned"""
    interval: int = 10
    """optimizer steps between two logged points"""
    first: int | None = None
    """step of the first logged point (default: ``interval``)"""
    events: tuple[Event, ...] = ()
    """planted events (empty: healthy)"""
    seed: int = 0
    """seed of the curve and of every other random number of the file"""
    notes: str = ""
    """what is special about this format (MANIFEST notes)"""
    read_with: dict | None = None
    """the reader flags the text needs because it lacks what they say (MANIFEST read_with)"""
    warns: str = ""
    """a phrase of the warning that asks for ``read_with`` when the file is read without it (MANIFEST warns)"""


def parse_printed(text: str) -> float:
    """The float a person reads from a printed loss (``nan``, ``inf``, ``1.2E+00``, ``tensor(2.3)``)."""
    t = text.strip().removeprefix("tensor(").rstrip(")").split(",")[0].strip("'\"")
    if t.lower().startswith("nan"):  # Lightning pads NaN to "nan.0"
        return float("nan")
    return float(t)


@dataclass
class Run:
    """The run being rendered: planned curve plus what the renderer actually printed."""

    spec: Spec
    loss: list[float] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    printed: list[tuple[int, float]] = field(default_factory=list)
    event_steps: list[tuple[str, int]] | None = None
    rng: random.Random = field(default_factory=random.Random)

    @classmethod
    def plan(cls, spec: Spec) -> Run:
        """Build the run of ``spec``: the curve and the logged steps."""
        first = spec.interval if spec.first is None else spec.first
        return cls(spec=spec, loss=curve(spec.points, spec.seed, spec.events),
                   steps=[first + i * spec.interval for i in range(spec.points)],
                   rng=random.Random(spec.seed * 7919 + 17))

    @property
    def n(self) -> int:
        """Number of planned logged points."""
        return len(self.loss)

    @property
    def total(self) -> int:
        """The run's planned number of optimizer steps (max steps / train iters)."""
        return self.steps[-1]

    def show(self, i: int, text: str, step: int | None = None) -> str:
        """Record that point ``i`` is printed as ``text`` (at ``step``, default its planned step)."""
        self.printed.append((self.steps[i] if step is None else step, parse_printed(text)))
        return text

    def crash(self, step: int) -> None:
        """Record that the trainer stopped on a non-finite loss at ``step`` (a crash line names it)."""
        self.printed.append((step, float("nan")))

    def onsets(self) -> list[tuple[EventKind, int]]:
        """(kind, point index) of the planted events, in order."""
        return sorted(((e.kind, e.onset(self.n)) for e in self.spec.events), key=lambda x: x[1])

    def nan_from(self) -> int | None:
        """First point index whose planned loss is NaN (None if none)."""
        for i, v in enumerate(self.loss):
            if math.isnan(v):
                return i
        return None

    def lr(self, step: int, peak: float = 3e-4, warmup_frac: float = 0.02) -> float:
        """Warm-up then cosine learning rate at ``step``."""
        warm = max(1, int(self.total * warmup_frac))
        if step < warm:
            return peak * step / warm
        t = (step - warm) / max(1, self.total - warm)
        return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))

    def gnorm(self, i: int) -> float:
        """A gradient norm that follows the loss: large early, larger at events, NaN with a NaN loss."""
        v = self.loss[i]
        if math.isnan(v):
            return float("nan")
        base = 0.25 + 2.5 * math.exp(-i / max(1.0, self.n / 30))
        jump = max(0.0, v - (self.loss[i - 1] if i and not math.isnan(self.loss[i - 1]) else v))
        return base * (1 + self.rng.gauss(0, 0.08)) + 4.0 * jump

    def entry(self) -> dict:
        """The MANIFEST entry, from what was printed."""
        pts = self.printed
        finite = [(s, v) for s, v in pts if math.isfinite(v)]
        picks = [finite[k] for k in sorted({0, len(finite) // 3, (2 * len(finite)) // 3, len(finite) - 1})] if finite else []
        events = self.event_steps
        if events is None:
            events = [(k.value, self.steps[i]) for k, i in self.onsets()]
        s = self.spec
        return {
            "file": s.file, "writer": s.writer, "source": s.source,
            "healthy": not events,
            "step_key": s.step_key, "loss_key": s.loss_key,
            "steps": {"first": pts[0][0], "last": pts[-1][0], "count": len(pts)},
            "loss_at": {str(st): v for st, v in picks},
            "events": [{"kind": k, "step": st} for k, st in events],
            "notes": s.notes,
            **({"read_with": s.read_with, "warns": s.warns} if s.read_with else {}),
        }


class Clock:
    """Wall clock of a run: starts at a fixed date and moves forward by jittered seconds."""

    def __init__(self, rng: random.Random, start: datetime = datetime(2026, 3, 2, 9, 14, 5, 120000)):
        self.t = start
        self.rng = rng

    def tick(self, seconds: float) -> datetime:
        """Advance by ``seconds`` (+-10%) and return the new time."""
        self.t += timedelta(seconds=seconds * (1 + self.rng.uniform(-0.1, 0.1)))
        return self.t
