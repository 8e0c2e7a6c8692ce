"""Stalled updates as incidents: a run that kept logging while no update was applied.

Runs :mod:`lossguard.detect.updates_stopped` over the grad norm (a negative sentinel: DeepSpeed's -1 on
a skipped step), the analysed loss (the same float repeated exactly) and the guard's ``skip``
events, and turns each stretch of at least ``STALL_STEPS`` steps into one ``updates_stopped``
incident (critical: the run is not training). Stretches of different traces that overlap are
one incident, named after the first trace found.
"""
from __future__ import annotations

import math

import numpy as np

from .. import metrics as M
from ..detect.updates_stopped import STALL_STEPS, StallCause, consecutive_mask, find_stalls, flat_mask, sentinel_mask
from ..recovery.severity import Severity
from ..runlog import RunLog
from .incident import Incident, IncidentKind as K

_WHY = {
    StallCause.SKIP_SENTINEL: "the grad norm was logged as {v:g} (a skipped step's sentinel, e.g. DeepSpeed's -1 "
                              "when it skips a step with non-finite gradients) on every one of them",
    StallCause.FLAT_LOSS: "the loss repeated exactly the same value ({v:.10g}) on every one of them: a model "
                          "updating on new batches never does",
    StallCause.GUARD_SKIPS: "the guard withheld the update of every one of them (a skip event on each step)",
}


def _candidates(log: RunLog, metric: str) -> list[tuple[StallCause, np.ndarray, np.ndarray, np.ndarray]]:
    """(cause, steps, mask, values) per trace the log has (the values name a typical one in the evidence)."""
    out = []
    if M.GRAD_NORM in log.series:
        steps, values = log.live(M.GRAD_NORM)
        out.append((StallCause.SKIP_SENTINEL, steps, sentinel_mask(values), values))
    if metric in log.series:
        steps, values = log.live(metric)
        out.append((StallCause.FLAT_LOSS, steps, flat_mask(values), values))
    skips = np.array(sorted({int(e["step"]) for e in log.events if e.get("event") == "skip" and not e.get("shadow")
                             and isinstance(e.get("step"), (int, float))}), dtype=np.int64)
    if len(skips):
        out.append((StallCause.GUARD_SKIPS, skips, consecutive_mask(skips), np.full(len(skips), math.nan)))
    return out


def stalled_updates(log: RunLog, metric: str, out: list[Incident], *, min_steps: int = STALL_STEPS) -> None:
    """Append one ``updates_stopped`` incident per stretch without updates (see the module docstring)."""
    last_step = max((int(s.steps[-1]) for s in log.series.values() if len(s.steps)), default=None)
    found: list[Incident] = []
    for cause, steps, mask, values in _candidates(log, metric):
        for st in find_stalls(steps, mask, cause, min_steps=min_steps):
            onset, stop = int(steps[st.start]), int(steps[st.stop])
            if any(i.onset <= stop and onset <= i.details["last_step"] for i in found):
                continue  # the same stretch seen through another trace
            n = stop - onset + 1
            ongoing = last_step is not None and stop >= last_step
            v = float(values[st.start])
            found.append(Incident(
                kind=K.UPDATES_STOPPED, metric=M.GRAD_NORM if cause is StallCause.SKIP_SENTINEL else metric,
                onset=onset, peak=onset, end=None if ongoing else stop, baseline=math.nan, peak_value=v,
                magnitude=math.nan, magnitude_sigma=math.nan, severity=Severity.CRITICAL,
                evidence=(f"No update was applied for {n} steps ({onset}-{stop}, {st.points} logged points"
                          f"{', to the end of the log' if ongoing else ''}): " + _WHY[cause].format(v=v) + "."),
                details={"cause": cause.value, "steps": n, "points": st.points, "last_step": stop}))
    out.extend(found)
