"""Score detections against a generated run's ground truth, one-to-one, within a tolerance.

The tolerance follows :mod:`evals.scoring` exactly: a detection's onset matches a true
event when it lies in ``[onset - margin, onset + margin + slack]`` with ``margin = max(10 logged
points, 1% of the run's steps)`` (:func:`evals.scoring.margin_steps`); ``slack`` is 5%
of the run for a divergence and the cascade length (peak - onset) for a loss-scale collapse; an
event's own ``window`` widens the range. Pairs are taken closest first, each event found at most
once; a second detection of one event is a false alarm. A detection matching a "don't care" event
(same kind, or both loss spikes; any kind in the kind-blind score) is dropped. Kinds are compared
as strings (``IncidentKind`` values), so ``regime_change`` works before the enum has it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from evals.scoring import Counts, margin_steps
from evals.curves.truth import LOSS_SPIKE_KINDS, CurveRun, EventKind as E, TruthEvent

_SPIKE_VALUES = frozenset(k.value for k in LOSS_SPIKE_KINDS)


@dataclass(frozen=True, kw_only=True)
class Claim:
    """One detection: a kind (its string value) and an onset step."""

    kind: str
    onset: int


def claims(incidents: Iterable[Any]) -> list[Claim]:
    """Incidents (anything with ``kind`` and ``onset``) as claims."""
    return [Claim(kind=getattr(i.kind, "value", str(i.kind)), onset=int(i.onset)) for i in incidents]


def window(e: TruthEvent, run: CurveRun) -> tuple[int, int]:
    """Steps ``[lo, hi]`` in which a claim's onset matches ``e``."""
    m = margin_steps(run.span, run.log_every)
    slack = 0
    if e.kind is E.DIVERGENCE:
        slack = int(0.05 * run.span)
    elif e.kind is E.LOSS_SCALE_COLLAPSE:
        slack = e.peak - e.onset
    lo, hi = e.onset - m, e.onset + m + slack
    if e.window is not None:
        lo, hi = min(lo, e.window[0] - m), max(hi, e.window[1] + m)
    return lo, hi


def _group(kind: str) -> str:
    return "spike" if kind in _SPIKE_VALUES else kind


@dataclass
class Tally(Counts):
    """Hits, false alarms, misses, onset errors (claim onset - true onset, steps) of one class,
    and claims dropped because they matched a don't-care event.

    ``errors`` are over matched pairs only, so they cannot exceed the tolerance; ``nearest`` is the
    error of the nearest claim of the event's kind anywhere in the run (one per event that has any),
    which shows how far off a dating is even when it falls outside the tolerance. Precision, recall
    and F1 are :class:`evals.scoring.Counts`'s (its ``delays`` stay unused here)."""

    errors: list[int] = field(default_factory=list)
    errors_pct: list[float] = field(default_factory=list)
    ignored: int = 0
    nearest: list[int] = field(default_factory=list)
    nearest_pct: list[float] = field(default_factory=list)

    def add(self, other: "Tally") -> None:
        """Accumulate another tally."""
        self.tp, self.fp, self.fn = self.tp + other.tp, self.fp + other.fp, self.fn + other.fn
        self.ignored += other.ignored
        self.nearest += other.nearest
        self.nearest_pct += other.nearest_pct
        self.errors += other.errors
        self.errors_pct += other.errors_pct


def match(run: CurveRun, found: Sequence[Claim], *, same: Callable[[str, str], bool],
          truth: Sequence[TruthEvent] | None = None) -> Tally:
    """Match ``found`` to the run's events one-to-one, closest first.

    Args:
        run: the run (its span and logging interval set the tolerance).
        found: the claims to score.
        same: whether a claim's kind may match an event's kind.
        truth: the events to consider (default: all of the run's, don't-care ones included).
    """
    truth = run.truth if truth is None else truth
    real = [e for e in truth if not e.ignore]
    wins = [window(e, run) for e in real]
    cands = sorted((abs(c.onset - e.onset), ti, ci) for ti, (e, (lo, hi)) in enumerate(zip(real, wins))
                   for ci, c in enumerate(found) if same(c.kind, e.kind.value) and lo <= c.onset <= hi)
    used_t: set[int] = set()
    used_c: set[int] = set()
    out = Tally()
    for _, ti, ci in cands:
        if ti in used_t or ci in used_c:
            continue
        used_t.add(ti)
        used_c.add(ci)
        err = found[ci].onset - real[ti].onset
        out.errors.append(err)
        out.errors_pct.append(100.0 * err / max(run.span, 1))
    ignored = [(e, window(e, run)) for e in truth if e.ignore]
    for ci, c in enumerate(found):
        if ci in used_c:
            continue
        if any((same(c.kind, e.kind.value) or _group(c.kind) == _group(e.kind.value)) and lo <= c.onset <= hi
               for e, (lo, hi) in ignored):
            out.ignored += 1  # matches a don't-care event: neither hit nor false alarm
            continue
        out.fp += 1
    out.tp = len(used_t)
    out.fn = len(real) - len(used_t)
    return out


@dataclass
class RunScore:
    """The score of one run: kind-blind and per kind (strict)."""

    blind: Tally
    per_kind: dict[str, Tally]
    clean: bool
    clean_alarms: int


def score(run: CurveRun, found: Sequence[Claim]) -> RunScore:
    """Score one run's claims (see the module docstring for the rules)."""
    blind = match(run, found, same=lambda a, b: True)
    per_kind: dict[str, Tally] = {}
    kinds = {e.kind.value for e in run.truth if not e.ignore} | {c.kind for c in found}
    for k in kinds:
        truth = [e for e in run.truth if e.kind.value == k or (e.ignore and _group(e.kind.value) == _group(k))]
        mine = [c for c in found if c.kind == k]
        per_kind[k] = match(run, mine, same=lambda a, b: a == b, truth=truth)
        for e in (e for e in truth if not e.ignore and e.kind.value == k and mine):
            err = min((c.onset - e.onset for c in mine), key=abs)
            per_kind[k].nearest.append(err)
            per_kind[k].nearest_pct.append(100.0 * err / max(run.span, 1))
    clean = not run.events
    return RunScore(blind=blind, per_kind=per_kind, clean=clean, clean_alarms=blind.fp if clean else 0)
