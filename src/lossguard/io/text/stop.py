"""Where a crash line stops a run: the non-finite loss point it names (:mod:`.crash` finds the lines).

A crash line after the last loss line is a NaN loss at the step it names (the step after the last one
printed when it names none). A crash line may also come *before* the last loss lines when those only
repeat the non-finite value: Keras' ``TerminateOnNaN`` prints ``Batch 49: Invalid loss, terminating
training``, then the bar is finalised at its target (``100/100 ... loss: nan``), a step the run never
reached; the crash line's step is where the loss went non-finite, so it is read there too. When the
step is an ``epoch x batches per epoch + batch`` count, a crash line naming a batch is placed in the
epoch of the loss line before it.
"""
from __future__ import annotations

import numpy as np

from .choose import Choice, StepRule
from .names import StepKind, step_kind
from .records import Scan

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""(segment, step, value, line) of a metric's points, sorted by segment and step."""


def crash_point(scan: Scan, choice: Choice, loss: Arrays, per_epoch: int | None) -> tuple[Arrays, str] | None:
    """The loss points with the crash line's non-finite point added, and the warning that says so;
    None when no crash line adds one."""
    if not scan.crashes:
        return None
    seg, step, val, line = loss
    crash = scan.crashes[-1]
    before = np.flatnonzero(line <= crash.line)  # a crash glued after a bar's redraw shares its line
    later = line > crash.line
    if not len(before) or np.any(np.isfinite(val[later])):
        return None  # no loss before it, or the run went on after it
    i = int(before[np.argmax(line[before])])  # the last loss line before the crash line
    if not np.isfinite(val[i]):
        return None  # the log printed the non-finite loss itself: the crash line reports that one
    if crash.step is None:
        if np.any(later):
            return None  # the non-finite value printed after it is the point
        mine = step[seg == seg[i]]
        gaps = np.diff(mine)
        at = int(mine.max()) + (int(np.median(gaps)) if len(gaps) else 1)
    elif choice.rule is StepRule.EPOCH_BATCH:
        if crash.kind is not StepKind.BATCH or not per_epoch:
            return None  # an epoch or a global count is not in this numbering
        at = (int(step[i]) - 1) // per_epoch * per_epoch + crash.step  # the batch of the epoch in view
    else:
        kind = step_kind(choice.step[0]) if choice.rule is StepRule.LABEL else None
        same_counter = {crash.kind, kind} == {StepKind.GLOBAL_STEP, StepKind.ITERATION}
        if kind is not None and crash.kind is not kind and not same_counter:
            return None
        at = crash.step
    nxt = step[later & (seg == seg[i])]
    if at <= int(step[i]) or (len(nxt) and at >= int(nxt.min())):
        return None  # not between the last finite loss and what follows
    k = int(np.searchsorted(step[seg == seg[i]], at)) + int(np.sum(seg < seg[i]))
    added = (np.insert(seg, k, seg[i]), np.insert(step, k, at), np.insert(val, k, np.nan),
             np.insert(line, k, crash.line))
    return added, (f"line {crash.line} stops the run on a non-finite value at step {at}"
                   f"{'' if crash.step is not None else ' (the step after the last one printed)'}: "
                   "read as a NaN loss there")
