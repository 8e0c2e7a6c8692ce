"""The precursor statistics in framework mode (HF Trainer, Lightning), with no extra host read.

In the plain loop the guard runs the optimizer step itself, so one step's precursors (attention and
output logits of its forward, Adam's ratio before its update, the update ratio after it) ride at the
end of that step's verdict. In framework mode the verdict is read *before* the framework's optimizer
step (:mod:`.framework_step`), when the update ratio does not exist yet. So each step's precursors
are packed on the device right after its optimizer step (:meth:`FrameworkPrecursors.after_step`: no
sync) and read with the *next* step's verdict, in the one read framework mode makes anyway; the
last step's are read at :meth:`StabilityGuard.close`. They are logged as their own metric record
under their own step, written before the next step's record (the log stays in step order), and the
treatments respond then: one step later than in the plain loop (a QK-clip lands after the next
forward pass has run; the LR cut from the step after).

Under gradient accumulation the attention and output statistics are those of the step's last
micro-batch (each forward overwrites them).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .guard import StabilityGuard


class FrameworkPrecursors:
    """The step whose precursors are packed on the device and not yet read."""

    def __init__(self) -> None:
        self.pending: tuple[int, float, Any] | None = None
        """``(step, lr, packed device tensor)`` of the last optimizer step, or None."""
        self._lr = math.nan
        self._step: int | None = None

    def before_step(self, guard: StabilityGuard, step: int, lr: float) -> None:
        """Right before the framework's optimizer step of ``step`` (after the verdict):
        Adam's ratio and the parameters' copy for the update ratio."""
        self._step, self._lr = step, lr
        guard.precursors.before_step()

    def after_step(self, guard: StabilityGuard) -> None:
        """Right after the framework's optimizer step: the update ratio, then every statistic
        packed on the device for the next read (no sync). A call with no
        :meth:`before_step` since the last one (an optimizer step the guard did not judge) is ignored."""
        if self._step is None:
            return
        import torch

        with torch.no_grad():
            guard.precursors.after_step()
            self.pending = (self._step, self._lr, guard.precursors.packed())
        self._step = None

    def take(self) -> tuple[int, float, Any] | None:
        """The pending step's ``(step, lr, packed)``, cleared (None: none)."""
        out, self.pending = self.pending, None
        return out


def read_with_verdict(guard: StabilityGuard, packed: Any) -> tuple[Any, list]:
    """The verdict's ``packed`` values, after the pending precursors (if any) were read in the same
    transfer, logged and responded to. Returns ``(verdict values, decisions)``: the values a host
    list when precursors were read, else ``packed`` unchanged; the decisions the treatments ask the
    executor for (an update jump's, :mod:`lossguard.recovery.update_jump`: in framework mode its
    LR cut alone)."""
    fw = guard.framework_precursors
    pending = fw.take() if fw is not None else None
    if pending is None:
        return packed, []
    step, lr, pre = pending
    from .precursor_hook import append_values
    both = append_values(packed, pre)  # one transfer for the verdict and the precursors
    values = both if isinstance(both, list) else both.tolist()
    n = len(values) - int(pre.numel())
    asks = record(guard, step, lr, values[n:])
    return values[:n], asks


def drain_precursors(guard: StabilityGuard) -> None:
    """Read, log and respond to the pending precursors (at close: the run's last step)."""
    fw = guard.framework_precursors
    pending = fw.take() if fw is not None else None
    if pending is not None:
        step, lr, pre = pending
        record(guard, step, lr, pre.tolist())  # the run's end: a decision asked now has no step to act on


def record(guard: StabilityGuard, step: int, lr: float, values: list[float]) -> list:
    """Log one step's precursor values as a metric record and let the treatments respond; returns
    the decisions they ask the executor for."""
    from .precursor_hook import respond

    if guard.config.log_metrics:
        guard.log.metrics(step, guard.precursors.decode(values))
    return respond(guard, step, lr, values)
