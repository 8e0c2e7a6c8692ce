"""The run ledger's LR cut inside a framework's optimizer step (HF Trainer, Lightning).

The policy books LR cuts in the run ledger (``RunLedger.lr_cuts``; e.g. x0.1 for the rest of the
run after a recurrence or a loss-rising rollback: the optimizer, not the data, is suspected). The
plain loop applies ``policy.lr_factor(step)`` around its own ``optimizer.step()``; a framework calls
``optimizer.step()`` itself, so its callback scales the param groups' LRs right before the step and
puts them back right after it, before the framework steps its scheduler -- the same
:func:`~lossguard.guard.lr_scale.scale_lr` / :func:`~lossguard.guard.lr_scale.restore_lr` pair as the
plain loop, so the cut sits on top of whatever the scheduler set for that step and never compounds
(chainable schedulers such as ``ExponentialLR`` step from the unscaled value). A relaunched run
(the restart path) reads the ledger at start, so the cut booked before the restart is in force
from its ``start_step`` on.

The booking itself is recorded by the ledger and the guard's event log; this only announces once,
as a warning on this module's logger, when a cut starts being applied in this process.
"""
from __future__ import annotations

import logging

_log = logging.getLogger(__name__)


class LrCutApplier:
    """Scales a framework optimizer's LRs by the ledger's factor for one step at a time."""

    def __init__(self) -> None:
        self._saved: list | None = None
        self._optimizer = None
        self._announced: set[tuple] = set()

    @property
    def pending(self) -> bool:
        """True between :meth:`apply` (with a factor other than 1) and :meth:`restore`."""
        return self._saved is not None

    def apply(self, guard, step: int) -> float:
        """Scale ``guard.optimizer``'s LRs by the ledger's factor at ``step`` (call right before the
        framework's optimizer step). Returns the factor (1.0: nothing changed)."""
        from ..guard.lr_scale import scale_lr

        self.restore()  # a scale must never outlive its step (defensive: the hooks pair up)
        factor = float(guard.policy.lr_factor(step))
        if factor == 1.0:
            return factor
        self._announce(guard, step, factor)
        self._optimizer = guard.optimizer
        self._saved = scale_lr(guard.optimizer, factor)
        return factor

    def restore(self, *_args, **_kwargs) -> None:
        """Put the scheduled LRs back (call right after the optimizer step, before the scheduler;
        the extra arguments let it serve as a torch optimizer step hook)."""
        if self._saved is None:
            return
        from ..guard.lr_scale import restore_lr

        restore_lr(self._optimizer, self._saved)
        self._saved, self._optimizer = None, None

    def _announce(self, guard, step: int, factor: float) -> None:
        active = tuple((c.cause, c.start_step, c.until_step, c.factor)
                       for c in guard.ledger.lr_cuts if c.active(step))
        if active in self._announced:
            return
        self._announced.add(active)
        causes = ", ".join(f"{cause} x{f:g} from step {start}" + ("" if until is None else f" until {until}")
                           for cause, start, until, f in active)
        _log.warning("lossguard: the run ledger's LR cut is in force at step %d: scheduled LR x %g (%s)",
                     step, factor, causes)
