"""ResumeWatch: the live guard's view of repeated data after its own resumes.

The analyser finds repeated data at a resume with the level test of
:func:`lossguard.detect.resume.repeated_after`: the median of the first ``level_points`` finite
losses after the resume sits below the trend of the points before it. A live guard has that
evidence too: it knows when it resumed (``guard.restore()`` or a framework callback loads its
timeline from a checkpoint) and it sees every loss after it. So this is not a second rule but the
same function, fed online (the guard's :class:`~lossguard.guard.timeline.TimelineSlot` holds the
watch, since every load passes through it; ``act_on_verdict`` feeds it each step's loss):

- the guard keeps its last ``4 * level_points`` finite losses (all the level test reads before a
  resume) in its timeline state, which every checkpoint holds and a resume restores;
- a resume arms the watch (any load of the guard's timeline from a checkpoint: ``guard.restore()``,
  a framework callback restoring it); the ``level_points``-th finite loss after it completes the
  test's evidence, and the test runs once, there (:func:`repeated_data_decided_at`);
- the guard's own rollback (in process, or booked and finished by a restarted process) does not
  arm it: the guard rewinds its sampler to the checkpoint's position (or, without one, does not
  rewind the stream at all), so the data cannot repeat, while the LR cut that may come with the
  rollback can lower the loss for a while -- a dip the test would misread;
- a dip makes a :class:`~lossguard.recovery.finding.WholeLogFinding` that the policy answers with
  :meth:`RecoveryPolicy.observe_finding` -- the answer (rollback to the checkpoint the resume
  started from, the words) is the one the analyser's plan and ``simulate`` give for the same dip.

The analyser files its finding at the same point (:func:`repeated_data_decided_at`), so the three
name the same action at the same step. Cost: one float appended per step; the test runs once per
resume.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Any, Iterator

import numpy as np

from ..detect.resume import ResumeConfig, repeated_after
from .decision import Decision
from .finding import WholeLogFinding
from .policy import RecoveryPolicy

__all__ = ["ResumeWatch", "answered", "repeated_data_decided_at"]


def repeated_data_decided_at(boundary: int, cfg: ResumeConfig) -> int:
    """Index (of the finite loss points) at which the repeated-data level test has all its evidence:
    the ``level_points``-th point from the resume's first one (``boundary``). The analyser decides
    there and so does a live guard; neither can know earlier."""
    return int(boundary) + cfg.level_points - 1


class ResumeWatch:
    """Online twin of the analyser's repeated-data test at a resume.

    Args:
        cfg: the boundary tests' thresholds (the analyser's default :class:`ResumeConfig`).
    """

    def __init__(self, cfg: ResumeConfig | None = None) -> None:
        self.cfg = cfg = cfg or ResumeConfig()
        self.history: deque[float] = deque(maxlen=4 * cfg.level_points)
        """The latest finite losses (timeline state: what the level test reads before a resume)."""
        self._pre: list[float] | None = None   # armed: the history at the resume
        self._post: list[float] = []            # finite losses since the resume
        self._resumed_at: int | None = None     # step of the resume's first finite loss

    @property
    def armed(self) -> bool:
        """A resume happened and its level test has not run yet."""
        return self._pre is not None

    def resumed(self) -> None:
        """The timeline was just loaded from a checkpoint (a resume): watch what follows."""
        self._pre, self._post, self._resumed_at = list(self.history), [], None

    def disarm(self) -> None:
        """Not a resume to test after all (the guard's own rollback: see the module docstring)."""
        self._pre, self._post, self._resumed_at = None, [], None

    def update(self, step: int, loss: float) -> WholeLogFinding | None:
        """Feed one step's loss (in step order); returns the repeated-data finding on the step that
        completes the test's evidence when the loss there dipped below the pre-resume trend."""
        if not math.isfinite(loss):
            return None
        self.history.append(float(loss))
        if self._pre is None:
            return None
        if self._resumed_at is None:
            self._resumed_at = int(step)
        self._post.append(float(loss))
        if len(self._post) < self.cfg.level_points:
            return None
        pre, self._pre = self._pre, None
        x = np.asarray(pre + self._post, dtype=np.float64)
        b = len(pre)
        if repeated_after(x, b, 0, self.cfg) is None:
            return None
        # len(x) - 1 == repeated_data_decided_at(b): the point where the analyser files its finding too.
        return WholeLogFinding(kind="repeated_data", step=int(step), onset=self._resumed_at, live=True)

    def state_dict(self) -> dict[str, Any]:
        """Timeline state (saved in every checkpoint, rolled back with it)."""
        return {"history": list(self.history)}

    def load_state_dict(self, sd: dict[str, Any] | None) -> None:
        """Restore :meth:`state_dict` output (None: a checkpoint from before the watch) and arm the
        watch: loading the timeline from a checkpoint is a resume."""
        self.history.clear()
        self.history.extend(float(v) for v in (sd or {}).get("history", ()))
        self.resumed()


def answered(policy: RecoveryPolicy, finding: WholeLogFinding | None) -> Iterator[Decision]:
    """The policy's decisions for ``finding`` (none for None), asked only when iterated: after the
    step's own decisions, and not at all once one of them rolled back or halted (as ``simulate``
    plays a finding after the bad step at the same point, and never after a halt)."""
    if finding is not None:
        yield from policy.observe_finding(finding)
