"""The cap on consecutive withheld updates: a guard that skips every step is not guarding a run.

The recovery ladder escalates an episode to a rollback after a few bad steps, so a long streak of
withheld updates means something the ladder did not see as one episode -- every step non-finite
under a loss scale that cannot recover, a detector whose baseline froze on a bad level -- and the
run only looks alive (issue 23). :class:`WithheldStreak` counts consecutive withheld steps; at
``GuardConfig.max_withheld_streak`` it asks for a halt with a diagnosis. Its count is timeline
state (saved in every checkpoint with the guard's windows, rolled back with them). The analyser
flags the same thing in a log (:mod:`lossguard.classify.updates_stopped`), with the same default threshold
(:data:`lossguard.detect.updates_stopped.STALL_STEPS`).
"""
from __future__ import annotations

from typing import Any

from ..recovery.action import Action
from ..recovery.decision import Decision


class WithheldStreak:
    """Consecutive steps whose update was withheld, and the halt once there are ``cap`` of them.

    Args:
        cap: the streak that halts (None: never).
    """

    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self.count = 0
        self.first: int | None = None

    def update(self, step: int, withheld: bool) -> Decision | None:
        """Count one step; returns the HALT decision when the streak reaches the cap."""
        if not withheld:
            self.count, self.first = 0, None
            return None
        if self.count == 0:
            self.first = step
        self.count += 1
        if self.cap is None or self.count < self.cap:
            return None
        return Decision(Action.HALT, step, [
            f"{self.count} consecutive steps had their update withheld (steps {self.first}-{step}; "
            f"max_withheld_streak={self.cap}): the run logs but does not train. Look at the first of them: "
            "non-finite gradients (fp16 loss scale at its minimum, bf16 overflow), or a loss level that "
            "changed for good (then clear the halt and let the detectors re-learn it)"],
            {"onset": self.first, "withheld_streak": self.count, "cause": "updates_stopped"})

    def state_dict(self) -> dict[str, Any]:
        """``{"count", "first"}`` (JSON-safe)."""
        return {"count": self.count, "first": self.first}

    def load_state_dict(self, sd: dict[str, Any] | None) -> None:
        """Restore :meth:`state_dict` output (None: a checkpoint from before the cap; count 0)."""
        sd = sd or {}
        self.count, self.first = int(sd.get("count", 0)), sd.get("first")


class ReplayedStreak(WithheldStreak):
    """The same cap for :func:`lossguard.simulate.simulate`, which feeds the policy only some steps.

    A step the replay skips over was a good one (its update applied), so a gap in the log positions
    ends the streak; a rollback ends it too (the live guard restores the count its checkpoint held;
    the replay takes it to be 0). One rule, :meth:`WithheldStreak.update`, decides the halt for both.
    """

    def __init__(self, cap: int | None) -> None:
        super().__init__(cap)
        self._last: int | None = None

    def observe(self, index: int, step: int, withheld: bool, decisions: list[Decision]) -> list[Decision]:
        """Count the step at log position ``index``, after the policy's ``decisions`` for it;
        returns ``[the HALT decision]`` at the cap, else ``[]``."""
        rolled_back = any(d.action is Action.ROLLBACK for d in decisions)
        if rolled_back or self._last is None or index != self._last + 1:
            self.count, self.first = 0, None
        self._last = index if withheld and not rolled_back else None
        halt = None if rolled_back else self.update(step, withheld)
        return [] if halt is None else [halt]
