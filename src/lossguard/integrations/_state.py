"""What a framework callback saves of its guard: the timeline and the ledger, JSON-safe.

Shared by the HF and Lightning callbacks so both persist the same thing: ``{"timeline":
guard.state_dict(), "ledger": guard.ledger.to_dict()}``. A resumed framework run thereby keeps its
detector windows, open episode, budgets, skipped ranges and LR cuts.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any


def guard_state(guard) -> dict[str, Any]:
    """The callback's checkpointable state ({} before the guard exists)."""
    if guard is None:
        return {}
    # Plain Python throughout (the judge's state_dict guarantees it), so Lightning's checkpoints load
    # under torch.load(weights_only=True), torch's default since 2.6 (tests/test_guard_halt_final.py).
    return {"timeline": guard.state_dict(), "ledger": guard.ledger.to_dict()}


def restore_guard(guard, state: dict[str, Any] | None) -> None:
    """Load :func:`guard_state` output.

    Raises:
        CheckpointError: ``state`` is not :func:`guard_state` output (no ``timeline`` and ``ledger``).
    """
    if not state:
        return
    from ..errors import CheckpointError
    from ..recovery.ledger import RunLedger

    if not isinstance(state, dict) or "timeline" not in state or "ledger" not in state:
        raise CheckpointError("the checkpoint's lossguard callback state has no 'timeline' and 'ledger' "
                              f"(keys: {sorted(state) if isinstance(state, dict) else type(state).__name__})",
                              fix="resume from a checkpoint saved by this lossguard version's callback")
    guard.load_state_dict(state["timeline"])
    path = guard.ledger.path
    if path is not None and Path(path).exists():
        return  # the ledger on disk is newer than the checkpoint's copy (it is never rolled back)
    guard.adopt_ledger(RunLedger.from_dict(state["ledger"]))


def resume_ledger(guard, step: int) -> None:
    """A relaunched run has resumed at ``step``: clear the ledger's ``resume_from`` if it named
    this step, warn if it named another (the script resumed from the wrong checkpoint)."""
    led = guard.ledger
    if led.resume_from is None:
        return
    if int(led.resume_from) != int(step):
        import warnings

        warnings.warn(f"the run ledger asks to resume from step {led.resume_from}, the framework resumed at step "
                      f"{step}; pass lossguard's resume_checkpoint(...) as the checkpoint to resume from",
                      stacklevel=3)
        return
    guard.executor.after_restore(step)  # the timeline as the rollback leaves it (as in-process)
    led.resume_from = None
    led.save()


def exit_for_restart(guard, enabled: bool) -> None:
    """End the process with ExitCode.ROLLBACK when the guard booked a rollback for a restart."""
    if enabled and guard is not None and guard.restart_requested:
        from ..distributed.restart import ExitCode

        raise SystemExit(int(ExitCode.ROLLBACK))
