"""WatchEngine: decide incidents on a growing run, the same ones ``analyze`` names on the finished log.

Two layers, so that the cost of a new point does not grow with the log:

* **Online trigger, per point, O(1).** The loss goes through the shared online detectors
  (``OnlineOutlier`` -> ``OnlineEpisodes``, ``OnlineTrend``, ``OnlineNonFinite``). They raise an
  :attr:`~.events.EventKind.ALERT` the moment a point leaves its band or is not finite, and say
  *when* something may have been decided: an episode closed, a divergence was declared, a NaN run
  began.
* **Classification, per decision, O(window).** Then (and at least every ``recheck_points`` new
  points, for what only whole windows show: level shifts, stream and grad-norm spikes, resume
  tests) the very code of ``analyze`` runs on the bounded history (:class:`.history.RunHistory`).
  Its incidents are compared with those already printed: new decided ones are printed, a changed
  kind is an update, a vanished one is withdrawn.

An incident is *decided* when its episode has ended (``end`` known), when its kind cannot be undone
(NaN, divergence, loss-scale collapse, repeated data), or once a whole episode budget has passed
since its onset; never while the online detector still has an episode open on it. When the log
stops, :meth:`WatchEngine.finish` decides everything, as ``analyze`` does at the end of a file.

While the history holds the whole run (``history_points`` per metric, 16384 by default) the final
incidents are by construction those of ``analyze``. Past that, the oldest points are dropped and
incidents with an onset less than ``lead`` points after the oldest kept point are left as printed:
the detectors' state there is rebuilt from the kept points only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .. import metrics as M
from ..analysis import Analysis, analyze
from ..classify.incident import Incident, IncidentKind as K
from ..classify.settings import AnalyzeConfig
from ..errors import LossguardError, raise_all
from ..plan import PlanConfig, RecoveryPlan
from ..report.words import describe_plan, incident_summary
from .events import EventKind, WatchEvent
from .history import Points, RunHistory
from .trigger import OnlineTrigger

FINAL_KINDS = frozenset({K.NON_FINITE, K.DIVERGENCE, K.LOSS_SCALE_COLLAPSE, K.REPEATED_DATA})
"""Kinds printed as soon as they are found: later points cannot turn them into something else."""

_OWN_FAMILY = (K.NON_FINITE, K.LOSS_SCALE_COLLAPSE, K.REPEATED_DATA)

Key = tuple[str, int, str]
"""(metric, onset step, family): one printed incident. Kinds of one family can turn into each other
(a fast spike found later to be a spike without recovery); NaN, loss-scale and repeated-data
incidents are families of their own, so they never replace an episode at the same step."""


def _key(inc: Incident) -> Key:
    return (inc.metric, inc.onset, inc.kind.value if inc.kind in _OWN_FAMILY else "episode")


@dataclass(kw_only=True)
class WatchConfig:
    """Settings of :class:`WatchEngine`."""

    history_points: int = 16384
    """Points kept per metric (memory ~25 bytes each). Runs up to this long are analysed whole."""
    recheck_points: int = 512
    """Re-run the classification at least every this many new loss points even when the online
    detectors are quiet (level shifts, stream and grad-norm spikes, resume tests need windows)."""
    settings: AnalyzeConfig = field(default_factory=AnalyzeConfig)
    """The thresholds of ``analyze`` (the same defaults, so the same incidents)."""
    plan: PlanConfig = field(default_factory=PlanConfig)
    """The recovery recipe's numbers."""
    checkpoints: tuple[int, ...] | None = None
    """Steps of the checkpoints that exist (plans then roll back to one of them)."""

    def __post_init__(self) -> None:
        problems = []
        if self.history_points < 8192:
            # An incident is decided up to one episode budget (2000 points at most) after its
            # onset, and must then lie a lead (budget + 4 outlier windows) past the oldest kept point.
            problems.append(f"history_points must be >= 8192 (two episode budgets and the windows around them), "
                            f"got {self.history_points}")
        if self.recheck_points < 1:
            problems.append(f"recheck_points must be >= 1, got {self.recheck_points}")
        raise_all(problems)


class WatchEngine:
    """Follows one run's points and produces :class:`~.events.WatchEvent` as incidents are decided.

    Args:
        run: the run's name in every event (its path as the user gave it).
        config: settings.
    """

    def __init__(self, run: str, config: WatchConfig | None = None) -> None:
        self.run = run
        self.config = config or WatchConfig()
        self.history = RunHistory(capacity=self.config.history_points)
        self.metric: str | None = None
        self._trigger: OnlineTrigger | None = None
        self._warm: list[int] = []  # first loss steps, to learn the log interval before triggering
        self._since = 0
        self._due = False
        self._pending: list[WatchEvent] = []
        self.reported: dict[Key, tuple[Incident, RecoveryPlan | None]] = {}
        self.analyses = 0
        self.last: Analysis | None = None
        self.error: LossguardError | None = None

    # ---- feeding -------------------------------------------------------------------------------
    def feed(self, pts: Points) -> None:
        """Add a batch of new points from one source (a large one in pieces, so that catching up
        on a long log classifies along the way instead of letting the history drop points unseen)."""
        piece = max(1, self.config.history_points // 8)
        if pts.count <= piece:
            self._feed(pts)
            return
        longest = max(pts.series.values(), key=lambda sv: len(sv[0]))[0]
        cuts = longest[piece::piece]
        lo = None
        for i, hi in enumerate([*cuts.tolist(), None]):
            series = {}
            for name, (st, v) in pts.series.items():
                a = 0 if lo is None else int(np.searchsorted(st, lo))
                b = len(st) if hi is None else int(np.searchsorted(st, hi))
                if b > a:
                    series[name] = (st[a:b], v[a:b])
            first = i == 0
            self._feed(Points(pts.source, series, new_segment=pts.new_segment and first, note=pts.note,
                              start_time=pts.start_time, events=pts.events if first else [], join=pts.join))
            lo = hi

    def _feed(self, pts: Points) -> None:
        self.history.add(pts)
        if pts.new_segment:
            self._due = True  # resume tests look at the boundary; recheck soon
            self._since = max(self._since, self.config.recheck_points - 2 * self.config.settings.resume.level_points)
        metric = self._metric(pts)
        if metric is None or metric not in pts.series:
            return
        steps, values = pts.series[metric]
        for s, v in zip(np.asarray(steps).tolist(), np.asarray(values, dtype=np.float64).tolist(), strict=True):
            self._since += 1
            if self._trigger is None:
                self._warm.append(s)
                if len(self._warm) < 17:
                    continue
                gaps = np.diff(np.asarray(self._warm))
                interval = max(1, int(np.median(gaps[gaps > 0]))) if (gaps > 0).any() else 1
                self._trigger = OnlineTrigger(self.config.settings, interval)
                continue
            alert, decided = self._trigger.update(s, v)
            if alert is not None:
                self._pending.append(self._alert(alert))
            self._due |= decided
            if self._since >= self.config.history_points // 4:
                self._classify(final=False)  # catching up on a long log: decide before the history moves on

    def _metric(self, pts: Points) -> str | None:
        if self.metric is None:
            want = self.config.settings.metric
            names = list(pts.series)
            if want is not None:
                canonical = M.canonical_name(want)
                self.metric = want if want in names else (canonical if canonical in names else None)
            elif M.LOSS in names:
                self.metric = M.LOSS
            else:
                self.metric = next((m for m in names if M.is_loss(m)), None)
        return self.metric

    def _alert(self, a: dict) -> WatchEvent:
        metric = self.metric or "loss"
        if a["what"] == "non_finite":
            msg = f"{metric} is {a['value']} at step {a['step']}"
        else:
            msg = (f"{metric} {a['value']:.4g} at step {a['step']} is {a['z']:.1f} sigma above its baseline "
                   f"{a['baseline']:.4g}: a spike has begun; it is named once it recovers or runs out of budget")
        return WatchEvent(EventKind.ALERT, self.run, a["step"], msg, data={k: v for k, v in a.items() if k != "what"}
                          | {"alert": a["what"], "metric": metric})

    # ---- deciding ------------------------------------------------------------------------------
    def poll(self) -> list[WatchEvent]:
        """Events since the last call: alerts, and incidents decided by a classification if one is due."""
        if self._due or self._since >= self.config.recheck_points:
            self._classify(final=False)
        out, self._pending = self._pending, []
        return out

    def finish(self) -> list[WatchEvent]:
        """The log ended (or the user stopped): decide everything, as ``analyze`` would now."""
        if self.history.total_points:
            self._classify(final=True)
        out, self._pending = self._pending, []
        return out

    def _classify(self, *, final: bool) -> None:
        self._due, self._since = False, 0
        log = self.history.to_runlog()
        if log is None:
            return
        try:
            a = analyze(log, checkpoints=self.config.checkpoints, settings=self.config.settings, plan=self.config.plan)
        except LossguardError as exc:  # e.g. no loss yet: say it once, keep following
            if self.error is None or str(exc) != str(self.error):
                self._pending.append(WatchEvent(EventKind.NOTICE, self.run, None, f"cannot analyse yet: {exc}"))
            self.error = exc
            return
        self.error = None
        self.analyses += 1
        self.last = a
        k = a.log_interval
        dcfg = self.config.settings.for_interval(k)
        horizon = (dcfg.spike.budget_points + dcfg.spike.settle) * k
        lead = (dcfg.spike.budget_points + 4 * dcfg.outlier.window) * k
        firsts = [self.history.first_kept_step(m) for m in self.history.metrics]
        kept = [s for s in firsts if s is not None]
        reliable = (max(kept) + lead) if kept else -math.inf
        live_steps = a.log.live(a.metric)[0]
        edge = int(live_steps[-1]) if len(live_steps) else 0
        plans = {p.incident: p for p in a.plans}
        active = self._trigger.active_onset if self._trigger is not None and not final else None
        seen: set[Key] = set()
        for n, inc in enumerate(a.incidents):
            if inc.onset < reliable:
                continue  # its context was dropped from the history: keep what was printed
            key = self._match(inc)
            decided = final or inc.end is not None or inc.kind in FINAL_KINDS or edge - inc.onset >= horizon
            if active is not None and inc.metric == a.metric and inc.onset >= active:
                decided = False  # the online detector still has this episode open
            if key is not None:
                seen.add(key)
            if not decided:
                continue
            plan = plans.get(n)
            if key is None:
                self.reported[_key(inc)] = (inc, plan)
                seen.add(_key(inc))
                self._pending.append(self._incident(EventKind.INCIDENT, inc, plan))
                continue
            old, _ = self.reported.pop(key)
            self.reported[_key(inc)] = (inc, plan)
            seen.add(_key(inc))
            if old.kind != inc.kind:
                self._pending.append(self._incident(EventKind.UPDATE, inc, plan, old.kind))
        for key in [k_ for k_ in self.reported if k_ not in seen]:
            inc, plan = self.reported[key]
            if inc.onset < reliable:
                continue  # no longer in the history: it stands as printed
            del self.reported[key]
            self._pending.append(WatchEvent(
                EventKind.WITHDRAWN, self.run, inc.onset,
                f"{incident_summary(inc)} is no longer found: a later event explains it", incident=inc))

    def _match(self, inc: Incident) -> Key | None:
        """The key of the printed incident that ``inc`` is (same onset and family; or same kind and
        overlapping: a divergence whose onset moved as more of it was seen)."""
        key = _key(inc)
        if key in self.reported:
            return key
        for k, (old, _) in self.reported.items():
            if k[0] != inc.metric or old.kind != inc.kind:
                continue
            old_end = old.end if old.end is not None else old.peak
            new_end = inc.end if inc.end is not None else inc.peak
            if old.onset <= new_end and inc.onset <= old_end:
                return k
        return None

    def _incident(self, kind: EventKind, inc: Incident, plan: RecoveryPlan | None,
                  previous: K | None = None) -> WatchEvent:
        what = incident_summary(inc)
        if kind is EventKind.UPDATE and previous is not None:  # an update names the kind it replaces
            msg = f"now {inc.kind.value} (was {previous.value}): {what}"
        else:
            msg = what
        return WatchEvent(kind, self.run, inc.onset, msg, incident=inc, plan=plan, previous_kind=previous,
                          data={"plan_text": describe_plan(plan)} if plan is not None else {})

    # ---- state ---------------------------------------------------------------------------------
    def incidents(self) -> list[Incident]:
        """The incidents printed and standing, in onset order."""
        return sorted((i for i, _ in self.reported.values()), key=lambda i: (i.onset, i.kind.value))
