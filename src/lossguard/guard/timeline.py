"""TimelineSlot: the guard's timeline as a part of the TrainState, loaded without re-entering the guard.

A checkpoint holds the guard's *timeline* (detector windows, the policy's open episode, the data
counter) beside the model and optimizer. A rollback restores that checkpoint while the guard is in
the middle of deciding about a step -- inside ``guard.step`` -> policy -> executor. Loading the
guard's own state there would rewrite the policy under its own decision loop and then call back
into it. So the TrainState holds this slot, not the guard: saving reads the guard's state; loading
while the guard decides only *parks* the state, and the guard applies it once the decision loop is
over (:meth:`StabilityGuard._process`). Loading at any other time (a resume, a user's own
``state.restore``) applies at once.

The slot also holds the guard's :class:`~lossguard.recovery.resume_watch.ResumeWatch` (repeated data
after a resume), because it is where a load is seen: a load arms the watch, except the guard's own
rollback -- a parked load, or one while the ledger has a rollback booked (``resume_from``: a
framework restart finishing it) -- which rewinds the data exactly and so is not a resume to test.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from ..recovery.resume_watch import ResumeWatch


class TimelineSlot:
    """The guard's timeline as a ``state_dict`` / ``load_state_dict`` part of a TrainState.

    Args:
        guard: the :class:`StabilityGuard` whose ``state_dict`` / ``load_state_dict`` it forwards to.
    """

    def __init__(self, guard: Any) -> None:
        self.guard = guard
        self._parking = False
        self._parked: dict[str, Any] | None = None
        self.watch = ResumeWatch()
        """Repeated data after a resume, tested as the analyser tests it (its losses are timeline state)."""

    def state_dict(self) -> dict[str, Any]:
        """The guard's timeline (:meth:`StabilityGuard.state_dict`)."""
        return self.guard.state_dict()

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Apply ``sd`` to the guard, or park it while the guard is deciding (see the module docstring)."""
        if self._parking:
            self._parked = sd
        else:
            self.guard.load_state_dict(sd)
            if self.guard.ledger.resume_from is not None:  # the guard's own booked rollback, finished now
                self.watch.disarm()

    @contextmanager
    def parked(self) -> Iterator[None]:
        """While inside, loads are parked (the guard's decision loop)."""
        self._parking = True
        try:
            yield
        finally:
            self._parking = False

    def apply(self) -> None:
        """Apply the parked state to the guard, if a load was parked."""
        sd, self._parked = self._parked, None
        if sd is not None:
            self.guard.load_state_dict(sd)
            self.watch.disarm()  # the guard's own rollback: not a resume to test
