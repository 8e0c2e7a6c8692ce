"""One event, one incident: the incidents that are views of one event are folded into the one that
names its cause, with the others kept as evidence and in ``details["folded"]``.

* A NaN/Inf **grad norm** (or NaN-iteration count) during an fp16 loss-scale collapse is the
  overflow the collapse is made of: one incident, the collapse.
* A loss incident that begins with a loss-scale collapse (within :data:`FOLD_POINTS` logged points
  of its first halving, up to the scale's minimum) is the loss's view of it: one incident, the
  collapse.
* A loss stuck at exactly 0.0 together with a NaN/Inf grad norm is one event: the step overflowed
  and the loss was replaced. One incident, the non-finite one (or the collapse, if there is one).
"""
from __future__ import annotations

from .. import metrics as M
from .context import Context, overlap
from .incident import Incident, IncidentKind as K

FOLD_POINTS = 3
"""Logged points before a collapse's first halving within which a loss incident is part of it."""
LOSS_KINDS = frozenset({K.SPIKE_FAST, K.SPIKE_SLOW, K.SPIKE_NO_RECOVERY, K.DIVERGENCE, K.LEVEL_SHIFT,
                        K.REGIME_CHANGE})
"""Loss incidents that a cause on a companion series can take over."""


def _fold(into: Incident, members: list[Incident], why: str) -> None:
    into.details.setdefault("folded", []).extend(
        {"kind": m.kind.value, "metric": m.metric, "onset": m.onset, "peak": m.peak} for m in members)
    into.evidence += f" {why}: " + "; ".join(m.evidence for m in members)


def _until(inc: Incident, last_step: int) -> int:
    return inc.end if inc.end is not None else last_step


def one_event_one_incident(ctx: Context, incidents: list[Incident]) -> list[Incident]:
    """The incidents with the views of one event folded into the one that names its cause."""
    out = list(incidents)
    last = int(ctx.ev.all_steps[-1]) if len(ctx.ev.all_steps) else 0
    lead = FOLD_POINTS * ctx.interval
    gone: list[Incident] = []
    for c in [i for i in out if i.kind is K.LOSS_SCALE_COLLAPSE]:
        nan = [i for i in out if i.kind is K.NON_FINITE and i.metric in (M.GRAD_NORM, M.NAN_ITERS)
               and overlap(i.onset, i.onset, c.onset - lead, _until(c, last))]
        loss = [i for i in out if i.metric == ctx.metric and i.kind in LOSS_KINDS
                and c.onset - lead <= i.onset <= c.peak]
        if nan:
            _fold(c, nan, "Meanwhile (the overflows themselves)")
        if loss:
            _fold(c, loss, "The loss reacted (skipped updates, overflowing steps)")
        gone += nan + loss
    for z in [i for i in out if i.kind is K.REGIME_CHANGE and i.details.get("test") == "exact zero"]:
        owner = next((i for i in out if i.kind in (K.LOSS_SCALE_COLLAPSE, K.NON_FINITE) and i not in gone
                      and i is not z and abs(i.onset - z.onset) <= lead), None)
        if owner is not None and z not in gone:
            _fold(owner, [z], "At the same steps the loss became exactly 0.0")
            gone.append(z)
    return [i for i in out if all(i is not g for g in gone)]
