"""A halt is final across relaunches: a guard built on a halted run ledger refuses to train.

``torchrun --max-restarts`` (and most schedulers) relaunch a job on any non-zero exit, a halt's
included. The relaunched script builds a new guard on the same checkpoint directory, whose
``ledger.json`` says ``halted``; training on there would undo the halt the guard decided. So the
new guard raises :class:`TrainingHalted` at once, with the saved diagnosis, the checkpoint to resume
from, and the way to override: :meth:`RunLedger.clear_halt` (a person's decision, recorded in the
ledger's history), or a new checkpoint directory for a new run.
"""
from __future__ import annotations

from ..recovery.ledger import RunLedger
from .executor import TrainingHalted


def halted_error(ledger: RunLedger) -> TrainingHalted:
    """The error a guard raises when it starts on a ledger whose run was halted."""
    halts = [h for h in ledger.history if h.get("event") == "halt"]
    last = halts[-1] if halts else {}
    lines = ["lossguard halted this run before" + (f" (at step {last['step']})" if "step" in last else "")
             + "; a relaunched process does not train on after a halt."]
    lines += [f"  - {r}" for r in last.get("reasons", [])]
    resume = last.get("resume_from")
    lines.append(f"Resume from checkpoint step {resume} once the cause is fixed." if resume is not None
                 else "No checkpoint before the episode was available.")
    if last.get("diagnosis"):
        lines.append(f"Diagnosis: {last['diagnosis']}")
    where = "CKPT_DIR/ledger.json" if ledger.path is None else str(ledger.path)
    return TrainingHalted("\n".join(lines), path=ledger.path,
                          fix=f"fix the cause, then clear the halt to train on: python -c \"from lossguard.recovery "
                              f"import RunLedger; RunLedger.open('{where}').clear_halt()\" (or start the run in a "
                              f"new checkpoint directory)")
