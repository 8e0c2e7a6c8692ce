"""Score detections against the ground truth of synthetic runs: precision, recall, F1, delay.

Any predictor can be scored: it only has to return ``(kind, onset)`` pairs (or
:class:`~lossguard.classify.incident.Incident` objects). Matching rules, in the spirit of the
change-point metrics of ``ruptures`` (a detection is right when it is close enough to a true
break, each break counts once):

* **Window.** A detection matches a true event of the same kind when its onset lies in
  ``[onset - margin, onset + margin + slack]``, with ``margin = max(10 logged points, 1% of the run's
  steps)``. ``slack`` is 0 except for the two kinds without a sharp start: a divergence (a gradual
  turn upward, which no one can see before it leaves the noise; slack = 5% of the run) and a
  loss-scale collapse (the overflow cascade from its first overflow to the minimum scale). An event
  that carries its own ``window`` (a divergence: from the step its rising factor starts to the step
  its rise is 3 noise units above the minimum) widens that range to ``[earliest - margin,
  latest + margin]`` where that is wider.
* **One-to-one.** Pairs are taken closest first; a true event is found at most once, and a second
  detection of the same event (a double detection) is a false alarm.
* **Wrong kind.** In the strict score a detection of the wrong kind is a false alarm of its kind
  and the event is a miss of its kind. The *spike umbrella* score treats every loss-spike kind
  (:data:`~evals.synthetic.SPIKE_KINDS`) as one: finding the spike is what counts.
* **Don't care.** Events labelled ``ignore`` (data outliers, the grad-norm spike that accompanies
  a loss spike, spikes a rollback erased) are neither hits nor misses: a detection that matches
  one (same kind, or both loss-spike kinds) is dropped before counting.
* **Run-level claims.** A detection with onset None (a tool that says "this run diverged" without a
  step) matches any true event of its kind in the run; it has no delay.
* **Delay** is ``detection onset - true onset`` in steps, over matched detections.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from lossguard.classify.incident import Incident, IncidentKind as K
from evals.synthetic import SPIKE_KINDS, SyntheticRun, TrueEvent

SPIKE = "spike"
"""Name of the umbrella class in :attr:`SuiteScore.spike` and in tables."""


@dataclass(frozen=True)
class Detection:
    """One claim of a predictor.

    Attributes:
        kind: the kind claimed.
        onset: the step the episode began, or None for a claim about the whole run.
    """

    kind: K
    onset: int | None


def as_detections(predictions: Iterable[Any]) -> list[Detection]:
    """Normalise a predictor's output: Incidents, Detections, or ``(kind, onset)`` pairs."""
    out = []
    for p in predictions:
        if isinstance(p, Detection):
            out.append(p)
        elif isinstance(p, Incident):
            out.append(Detection(K(p.kind), int(p.onset)))
        else:
            kind, onset = p
            out.append(Detection(K(kind), None if onset is None else int(onset)))
    return out


@dataclass
class Counts:
    """Hits, false alarms, misses and delays of one class (a kind, or the spike umbrella)."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    delays: list[int] = field(default_factory=list)

    @property
    def precision(self) -> float | None:
        """tp / (tp + fp), or None when nothing was claimed."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        """tp / (tp + fn), or None when there was nothing to find."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    @property
    def f1(self) -> float | None:
        """Harmonic mean of precision and recall; 0 when one of them is 0 or undefined but not both."""
        p, r = self.precision, self.recall
        if p is None and r is None:
            return None
        p, r = p or 0.0, r or 0.0
        return 2 * p * r / (p + r) if p + r else 0.0

    def delay(self, q: float = 50) -> float | None:
        """Percentile ``q`` of the detection delay in steps (None without matched onsets)."""
        return float(np.percentile(self.delays, q)) if self.delays else None

    def add(self, other: "Counts") -> None:
        """Accumulate another run's counts."""
        self.tp += other.tp
        self.fp += other.fp
        self.fn += other.fn
        self.delays.extend(other.delays)


def margin_steps(span: int, log_every: int) -> int:
    """The matching margin: ``max(10 logged points, 1% of the run)`` in steps."""
    return int(max(10 * log_every, 0.01 * span))


def window(event: TrueEvent, *, span: int, log_every: int) -> tuple[int, int]:
    """Steps ``[lo, hi]`` in which a detection's onset matches ``event`` (see the module docstring)."""
    m = margin_steps(span, log_every)
    slack = 0
    if event.kind == K.DIVERGENCE:
        slack = int(0.05 * span)
    elif event.kind == K.LOSS_SCALE_COLLAPSE:
        slack = max(0, event.peak - event.onset)
    lo, hi = event.onset - m, event.onset + m + slack
    if event.window is not None:
        lo, hi = min(lo, event.window[0] - m), max(hi, event.window[1] + m)
    return lo, hi


def _group(kind: K) -> str:
    return SPIKE if kind in SPIKE_KINDS else kind.value


def match(truth: Sequence[TrueEvent], detections: Sequence[Detection], *, span: int, log_every: int,
          same: Callable[[K, K], bool]) -> tuple[list[tuple[TrueEvent, Detection]], list[Detection], list[TrueEvent]]:
    """One-to-one matching, closest first.

    Args:
        truth: true events (``ignore`` ones included; they only absorb detections).
        detections: the claims.
        span, log_every: the run's length in steps and its logging interval (for the margin).
        same: whether a detection's kind may match an event's kind.

    Returns:
        ``(pairs, false_alarms, misses)``.
    """
    real = [e for e in truth if not e.ignore]
    wins = [window(e, span=span, log_every=log_every) for e in real]
    cands = []
    for ti, (e, (lo, hi)) in enumerate(zip(real, wins)):
        for di, d in enumerate(detections):
            if same(d.kind, e.kind) and (d.onset is None or lo <= d.onset <= hi):
                cost = abs(d.onset - e.onset) if d.onset is not None else 1 << 60
                cands.append((cost, ti, di))
    cands.sort()
    used_t, used_d, pairs = set(), set(), []
    for _, ti, di in cands:
        if ti not in used_t and di not in used_d:
            used_t.add(ti)
            used_d.add(di)
            pairs.append((real[ti], detections[di]))
    ignored = [(e, window(e, span=span, log_every=log_every)) for e in truth if e.ignore]
    false_alarms = []
    for di, d in enumerate(detections):
        if di in used_d:
            continue
        if d.onset is not None and any(_group(d.kind) == _group(e.kind) and lo <= d.onset <= hi
                                       for e, (lo, hi) in ignored):
            continue  # a don't-care event: not a false alarm
        false_alarms.append(d)
    misses = [e for ti, e in enumerate(real) if ti not in used_t]
    return pairs, false_alarms, misses


def _counts(pairs, false_alarms, misses) -> Counts:
    c = Counts(tp=len(pairs), fp=len(false_alarms), fn=len(misses))
    c.delays = [d.onset - e.onset for e, d in pairs if d.onset is not None]
    return c


@dataclass
class SuiteScore:
    """Scores accumulated over runs.

    Attributes:
        per_kind: strict counts per kind (the detection's kind must equal the event's).
        spike: the spike umbrella (any loss-spike kind for any true loss-spike kind).
        found_by_kind: per true kind, ``[found, total]`` where found means matched by a detection
            of the same group (the umbrella for loss spikes, the kind itself otherwise).
        runs: how many runs were scored.
        clean_runs_with_alarm: clean runs (no real event) with at least one false alarm.
        clean_runs: clean runs scored.
    """

    per_kind: dict[K, Counts] = field(default_factory=lambda: {k: Counts() for k in K})
    spike: Counts = field(default_factory=Counts)
    found_by_kind: dict[K, list[int]] = field(default_factory=lambda: {k: [0, 0] for k in K})
    runs: int = 0
    clean_runs_with_alarm: int = 0
    clean_runs: int = 0

    def overall(self, kinds: Iterable[K] | None = None) -> Counts:
        """Strict counts summed over ``kinds`` (all by default)."""
        total = Counts()
        for k in (kinds if kinds is not None else K):
            total.add(self.per_kind[k])
        return total


def score_run(run: SyntheticRun, predictions: Iterable[Any], *, into: SuiteScore | None = None) -> SuiteScore:
    """Score one run's predictions (added to ``into`` when given)."""
    score = into if into is not None else SuiteScore()
    dets = as_detections(predictions)
    span, every = int(run.params["length"]), int(run.params["log_every"])
    for kind in K:
        truth = [e for e in run.truth if e.kind == kind or (e.ignore and _group(e.kind) == _group(kind))]
        mine = [d for d in dets if d.kind == kind]
        score.per_kind[kind].add(_counts(*match(truth, mine, span=span, log_every=every,
                                                same=lambda a, b: a == b)))
    spike_truth = [e for e in run.truth if e.kind in SPIKE_KINDS]
    spike_dets = [d for d in dets if d.kind in SPIKE_KINDS]
    pairs, fa, miss = match(spike_truth, spike_dets, span=span, log_every=every,
                            same=lambda a, b: True)
    score.spike.add(_counts(pairs, fa, miss))
    found = {id(e) for e, _ in pairs}
    for e in run.events:
        if e.kind not in SPIKE_KINDS:
            p, _, _ = match([e], dets, span=span, log_every=every, same=lambda a, b: a == b)
            found.update(id(x) for x, _ in p)
        score.found_by_kind[e.kind][0] += id(e) in found
        score.found_by_kind[e.kind][1] += 1
    score.runs += 1
    if not run.events:
        score.clean_runs += 1
        _, fa, _ = match(run.truth, dets, span=span, log_every=every, same=lambda a, b: a == b)
        score.clean_runs_with_alarm += bool(fa)
    return score


def score_runs(runs: Iterable[SyntheticRun], predict: Callable[[SyntheticRun], Iterable[Any]]) -> SuiteScore:
    """Run ``predict`` on every run and accumulate the scores."""
    score = SuiteScore()
    for run in runs:
        score_run(run, predict(run), into=score)
    return score
