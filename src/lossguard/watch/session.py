"""RunWatch: one run followed end to end (files -> points -> decided incidents), one poll at a time.

The CLI calls :meth:`RunWatch.step` every ``--every`` seconds and :meth:`RunWatch.finish` when the
run has been idle for ``--until-idle`` seconds or the user pressed Ctrl-C. Everything in between is
the business of the follower (:mod:`.follower`) and the engine (:mod:`.engine`).
"""
from __future__ import annotations

import math
import time
from enum import Enum

from .. import metrics as M
from ..recovery.severity import Severity
from .engine import WatchConfig, WatchEngine
from .events import EventKind, WatchEvent
from .follower import RunFollower
from .text import GrammarKeys


def severity_name(sev) -> str:
    """An incident's severity as its string (it may be a str-valued enum)."""
    return Severity(sev).value


class RunState(str, Enum):
    """A followed run's state, as the sweep line shows it."""

    WAITING = "waiting"
    """No point read yet."""
    RUNNING = "running"
    """Growing, nothing found."""
    ALERT = "alert"
    """A spike or NaN is in progress (not decided yet)."""
    INCIDENT = "incident"
    """At least one incident was decided."""
    STALLED = "stalled"
    """No file grew for the idle time."""


class RunWatch:
    """Follows one run.

    Args:
        name: the run's name in every event (the path as the user gave it).
        paths: its files or directories.
        config: engine settings.
        format: force a reader.
        keys: ``--step-key`` / ``--loss-key`` for text logs read by the grammar.
        clock: seconds, monotonic (tests pass a fake one).
    """

    def __init__(self, name: str, paths: list[str], config: WatchConfig | None = None, *,
                 format: str | None = None, keys: GrammarKeys | None = None, clock=time.monotonic) -> None:
        self.name = name
        self.follower = RunFollower(paths, format=format, keys=keys)
        self.engine = WatchEngine(name, config)
        self.clock = clock
        self.last_growth = clock()
        self.stalled = False
        self.alerting = False
        self.last_loss = math.nan

    def idle_seconds(self) -> float:
        """Seconds since a file of the run last grew."""
        return self.clock() - self.last_growth

    def step(self) -> list[WatchEvent]:
        """Read what the files gained and return the events it produced."""
        poll = self.follower.poll(self._feed)
        out = [WatchEvent(EventKind.NOTICE, self.name, None, n) for n in poll.notices]
        if poll.bytes_read:
            self.last_growth = self.clock()
            self.stalled = False
        events = self.engine.poll()
        for ev in events:
            if ev.kind is EventKind.ALERT:
                self.alerting = True
            elif ev.kind in (EventKind.INCIDENT, EventKind.UPDATE):
                self.alerting = False
        return out + events

    def _feed(self, pts) -> None:
        self.engine.feed(pts)
        metric = self.engine.metric or M.LOSS
        if metric in pts.series and len(pts.series[metric][1]):
            self.last_loss = float(pts.series[metric][1][-1])

    def stall(self) -> list[WatchEvent]:
        """Say (once per stall) that the run stopped writing, with any half-written line or record."""
        if self.stalled:
            return []
        self.stalled = True
        idle = self.idle_seconds()
        last = self.engine.history.last_step
        msg = (f"no new data for {idle:.1f} s (last step {last if last is not None else '-'}): "
               "the writer stopped or hangs")
        out = [WatchEvent(EventKind.STALLED, self.name, last, msg, data={"idle_seconds": round(idle, 1)})]
        out += [WatchEvent(EventKind.NOTICE, self.name, None, n) for n in self.follower.pending()]
        return out

    def finish(self) -> list[WatchEvent]:
        """The end: parse unterminated last lines and decide every incident, as ``analyze`` would."""
        poll = self.follower.flush()
        for pts in poll.points:
            self._feed(pts)
        out = [WatchEvent(EventKind.NOTICE, self.name, None, n) for n in poll.notices]
        return out + self.engine.finish()

    @property
    def state(self) -> RunState:
        """What the sweep line says about this run."""
        if self.stalled:
            return RunState.STALLED
        if self.engine.reported:
            return RunState.INCIDENT
        if self.alerting:
            return RunState.ALERT
        return RunState.WAITING if not self.engine.history.total_points else RunState.RUNNING

    def worst(self) -> str | None:
        """The worst severity among the incidents found, or None."""
        worst = Severity.worst(i.severity for i in self.engine.incidents())
        return worst.value if worst is not None else None

    def summary(self) -> dict:
        """JSON-ready facts for the last line and the sweep table."""
        incs = self.engine.incidents()
        return {
            "run": self.name, "state": self.state.value, "last_step": self.engine.history.last_step,
            "last_loss": self.last_loss if math.isfinite(self.last_loss) else None,
            "points": self.engine.history.total_points, "files": len(self.follower.files),
            "incidents": len(incs), "worst_severity": self.worst(),
            "kinds": sorted({i.kind.value for i in incs}), "classifications": self.engine.analyses,
            "idle_seconds": round(self.idle_seconds(), 1),
            "found": [{"kind": i.kind.value, "metric": i.metric, "onset": i.onset, "end": i.end,
                       "severity": severity_name(i.severity)} for i in incs],
        }
