"""How :class:`~lossguard.guard.StabilityGuard` carries the precursor statistics (kept apart from
the guard so that its step stays one read): they ride at the end of the judge's packed verdict, so
the step still makes ONE device-to-host transfer, deferred on CUDA like the verdict itself."""
from __future__ import annotations

from typing import Any


def make_monitor(model, optimizer, precursors: Any, treatment: Any):
    """The guard's :class:`~.precursors.PrecursorMonitor`: the one given, a new one for ``True`` (or
    when a ``treatment`` needs one), else None."""
    if precursors is None or precursors is False:
        if treatment is None:
            return None
        precursors = True
    if precursors is True:
        from .precursors import PrecursorMonitor
        return PrecursorMonitor(model, optimizer)
    return precursors


def append_precursors(monitor, packed):
    """The judge's ``packed`` (a host list or a device tensor) with the monitor's values appended."""
    return append_values(packed, monitor.packed())


def append_values(packed, pre):
    """``packed`` (a host list or a device tensor) with the device tensor ``pre`` appended: a host
    list stays a list (a host judge's verdict is already on the host), a tensor stays on its device."""
    if isinstance(packed, list):
        return packed + pre.tolist()
    import torch
    return torch.cat([packed.reshape(-1), pre.to(device=packed.device, dtype=packed.dtype)])


def respond(guard, step: int, lr: float, values: list[float]) -> list:
    """Let every treatment of ``guard`` respond to one step's precursor values (host floats) and log
    the records of what they did (nothing in shadow mode); the plain loop (:func:`.host_side.read_step`)
    and framework mode (:mod:`.framework_precursors`) both call it. Returns the decisions they ask the
    executor for (an update jump's rollback or LR cut, :mod:`lossguard.recovery.update_jump`)."""
    if guard.treatment is None or guard.config.shadow:
        return []
    asks = []
    for responder in responders(guard.treatment):
        for rec in responder.respond(step, guard.precursors, values, guard.ledger, lr):
            if isinstance(rec, dict):
                guard.log.event(rec)
            else:
                asks.append(rec)
    return asks


def split_precursors(monitor, packed):
    """``(verdict values, precursor values)`` from a host copy made by :func:`append_precursors`."""
    values = packed if isinstance(packed, list) else packed.tolist()
    n = len(values) - monitor.packed_length()
    return values[:n], values[n:]


def responders(treatment) -> list:
    """The guard's ``treatment`` argument as a list of responders (None: none)."""
    if treatment is None:
        return []
    return list(treatment) if isinstance(treatment, (list, tuple)) else [treatment]


def responders_state(treatment) -> list:
    """Each responder's budgets (its ``state_dict()``), in order: they go into the guard's checkpointed
    state, so a resume does not reset how often a treatment may still act."""
    return [r.state_dict() for r in responders(treatment)]


def load_responders_state(treatment, states) -> None:
    """Restore :func:`responders_state` output (None, or a different number of responders: a
    checkpoint from another configuration, left alone)."""
    rs = responders(treatment)
    if states is None or len(states) != len(rs):
        return
    for r, st in zip(rs, states, strict=True):
        r.load_state_dict(st)
