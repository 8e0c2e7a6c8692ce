"""Curve families: named groups of generator settings, split once and for all into TUNE and TEST.

The split is the protocol: detectors may be tuned on TUNE families only; TEST families are the
held-out score. TEST holds the noise models TUNE never shows (Student-t heavy tails, AR(1)
correlated noise) and a schedule TUNE never shows (cosine with warm restarts), so a detector tuned
to TUNE's curves and noise cannot simply have memorised them.

| family | split | schedule | noise | logged points | log every | steps |
|---|---|---|---|---|---|---|
| cosine-gauss-dense | tune | cosine | gaussian | 1000-5000 | 1-5 | 1k-25k |
| wsd-mult-mid | tune | wsd | multiplicative | 500-3000 | 10-50 | 5k-150k |
| const-short | tune | constant | gaussian, multiplicative | 30-120 | 1-20 | 30-2.4k |
| cosine-bursty-long | tune | cosine | bursty | 2000-10000 | 50-100 | 100k-1M |
| linear-mult-sparse | tune | linear | multiplicative | 300-1500 | 20-100 | 6k-150k |
| restarts-studentt | test | cosine_restarts | student_t | 800-4000 | 5-50 | 4k-200k |
| wsd-ar1-dense | test | wsd | ar1 | 1000-6000 | 1-5 | 1k-30k |
| linear-studentt-long | test | linear | student_t | 3000-10000 | 50-100 | 150k-1M |
| restarts-ar1-short | test | cosine_restarts | ar1, student_t | 30-150 | 1-50 | 30-7.5k |
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from evals.curves.noise import NoiseModel as N
from evals.curves.schedules import Schedule as S

MAX_STEPS = 1_000_000
"""Longest run generated, in steps."""


class Split(str, Enum):
    """Which side of the protocol a family is on."""

    TUNE = "tune"
    """Detectors may be developed and tuned on these."""
    TEST = "test"
    """Held out: only ever scored."""


@dataclass(frozen=True, kw_only=True)
class Family:
    """One curve family.

    Attributes:
        name: stable identifier (used in seeds, tables and file names).
        split: TUNE or TEST.
        schedules: LR schedules a run may draw.
        noise: noise models a run may draw.
        points: inclusive range of logged points.
        every: inclusive range of steps between logged points.
        rel_noise: range of the noise spread as a fraction of the final loss.
    """

    name: str
    split: Split
    schedules: tuple[S, ...]
    noise: tuple[N, ...]
    points: tuple[int, int]
    every: tuple[int, int]
    rel_noise: tuple[float, float] = (0.004, 0.02)

    def __post_init__(self) -> None:
        if not self.schedules:
            raise ValueError("Family.schedules must not be empty")
        if not self.noise:
            raise ValueError("Family.noise must not be empty")
        if not 30 <= self.points[0] <= self.points[1]:
            raise ValueError(f"Family.points must be an ordered range from >= 30, got {self.points}")
        if not 1 <= self.every[0] <= self.every[1] <= 100:
            raise ValueError(f"Family.every must be an ordered range within [1, 100], got {self.every}")
        if not 0 < self.rel_noise[0] <= self.rel_noise[1] < 0.2:
            raise ValueError(f"Family.rel_noise must be an ordered range within (0, 0.2), got {self.rel_noise}")


FAMILIES: tuple[Family, ...] = (
    Family(name="cosine-gauss-dense", split=Split.TUNE, schedules=(S.COSINE,), noise=(N.GAUSSIAN,),
           points=(1000, 5000), every=(1, 5)),
    Family(name="wsd-mult-mid", split=Split.TUNE, schedules=(S.WSD,), noise=(N.MULTIPLICATIVE,),
           points=(500, 3000), every=(10, 50)),
    Family(name="const-short", split=Split.TUNE, schedules=(S.CONSTANT,), noise=(N.GAUSSIAN, N.MULTIPLICATIVE),
           points=(30, 120), every=(1, 20)),
    Family(name="cosine-bursty-long", split=Split.TUNE, schedules=(S.COSINE,), noise=(N.BURSTY,),
           points=(2000, 10000), every=(50, 100)),
    Family(name="linear-mult-sparse", split=Split.TUNE, schedules=(S.LINEAR,), noise=(N.MULTIPLICATIVE,),
           points=(300, 1500), every=(20, 100)),
    Family(name="restarts-studentt", split=Split.TEST, schedules=(S.COSINE_RESTARTS,), noise=(N.STUDENT_T,),
           points=(800, 4000), every=(5, 50)),
    Family(name="wsd-ar1-dense", split=Split.TEST, schedules=(S.WSD,), noise=(N.AR1,),
           points=(1000, 6000), every=(1, 5)),
    Family(name="linear-studentt-long", split=Split.TEST, schedules=(S.LINEAR,), noise=(N.STUDENT_T,),
           points=(3000, 10000), every=(50, 100)),
    Family(name="restarts-ar1-short", split=Split.TEST, schedules=(S.COSINE_RESTARTS,), noise=(N.AR1, N.STUDENT_T),
           points=(30, 150), every=(1, 50)),
)
"""The fixed family table (see the module docstring). Never move a family between splits."""


def families(split: Split | str | None = None) -> list[Family]:
    """The families of one split (``"tune"``, ``"test"``), or all of them for None / ``"all"``."""
    if split is None or split == "all":
        return list(FAMILIES)
    return [f for f in FAMILIES if f.split == Split(split)]


def family(name: str) -> Family:
    """The family called ``name``."""
    for f in FAMILIES:
        if f.name == name:
            return f
    raise KeyError(f"no curve family {name!r}; known: {', '.join(f.name for f in FAMILIES)}")
