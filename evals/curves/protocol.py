"""The tune/test protocol: which seeds belong to which split, and running a predictor over a family.

Seeds are a pure function of (split, family index, run index) and the TUNE and TEST ranges are
disjoint, so a TEST run can never be drawn while tuning. Run ``i`` of a family injects
``KIND_CYCLE[i % len(KIND_CYCLE)]`` (a clean run first, then every kind in turn), and is written in
the ``i``-th format that can hold it, then read back with :func:`lossguard.io.read_log` before
analysis, so every format's reader is on the scored path.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable, Iterator

from evals.curves.families import FAMILIES, Family, Split
from evals.curves.events import INJECTORS
from evals.curves.generator import generate
from evals.curves.truth import CurveRun, EventKind
from evals.curves.writers import LogFormat, formats_for, write_log

KIND_CYCLE: tuple[EventKind | None, ...] = (None, *(k for k in EventKind if k in INJECTORS))
"""The kind of run ``i`` is ``KIND_CYCLE[i % len(KIND_CYCLE)]``; None is a clean run. Only the kinds
this generator injects (the analyser's newer kinds -- stall, updates stopped -- have no injector)."""
SEED_BASE = {Split.TUNE: 10_000_000, Split.TEST: 20_000_000}
"""First seed of each split; a family gets a block of SEEDS_PER_FAMILY seeds."""
SEEDS_PER_FAMILY = 100_000


def seed_for(fam: Family, i: int) -> int:
    """The seed of run ``i`` of family ``fam`` (disjoint between splits and families)."""
    if not 0 <= i < SEEDS_PER_FAMILY:
        raise ValueError(f"run index must be in [0, {SEEDS_PER_FAMILY}), got {i}")
    return SEED_BASE[fam.split] + FAMILIES.index(fam) * SEEDS_PER_FAMILY + i


def family_runs(fam: Family, n: int) -> Iterator[CurveRun]:
    """The first ``n`` runs of a family, in order (seeded: always the same runs)."""
    for i in range(n):
        yield generate(fam, KIND_CYCLE[i % len(KIND_CYCLE)], seed=seed_for(fam, i))


def format_for(run: CurveRun, i: int) -> LogFormat:
    """The format run ``i`` is written in (rotating through the formats that can hold it)."""
    fmts = formats_for(run)
    return fmts[i % len(fmts)]


def read_back(run: CurveRun, i: int, directory: Path):
    """Write run ``i`` in its format into ``directory`` and read it back; return the RunLog."""
    from lossguard.io import read_log

    path = write_log(run, format_for(run, i), directory, name=f"{run.family}-{i}")
    return read_log(path)


def run_family(fam: Family, n: int, predict: Callable[[object], list]) -> Iterator[tuple[int, CurveRun, list]]:
    """Generate, write, read back and predict ``n`` runs of ``fam``; yield ``(i, run, predictions)``."""
    with tempfile.TemporaryDirectory(prefix="lossguard-curves-") as tmp:
        for i, run in enumerate(family_runs(fam, n)):
            yield i, run, predict(read_back(run, i, Path(tmp)))
