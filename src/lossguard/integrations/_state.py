"""What a framework callback saves of its guard: the timeline and the ledger, JSON-safe.

Shared by the HF and Lightning callbacks so both persist the same thing: ``{"timeline":
guard.state_dict(), "ledger": guard.ledger.to_dict()}``. A resumed framework run thereby keeps its
detector windows, open episode, budgets, skipped ranges and LR cuts.
"""
from __future__ import annotations

from typing import Any


def guard_state(guard) -> dict[str, Any]:
    """The callback's checkpointable state ({} before the guard exists)."""
    if guard is None:
        return {}
    return {"timeline": guard.state_dict(), "ledger": guard.ledger.to_dict()}


def restore_guard(guard, state: dict[str, Any] | None) -> None:
    """Load :func:`guard_state` output (also the pre-ledger format: the guard's state dict alone)."""
    if not state:
        return
    from ..recovery.ledger import RunLedger

    if "timeline" not in state:  # a checkpoint written before the ledger existed
        guard.load_state_dict(state)
        return
    guard.load_state_dict(state["timeline"])
    guard.adopt_ledger(RunLedger.from_dict(state["ledger"]))
