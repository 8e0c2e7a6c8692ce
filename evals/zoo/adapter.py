"""The ONE place where the zoo touches the guard's API: building it, and reading what it did.

Everything else in the zoo is the guard's user. When the guard's API changes, this file follows it.
The plain loop is the README's loop (``guard.batches(loader, steps=...)``, ``guard.step(loss)``);
the HF family uses ``lossguard.integrations.hf.StabilityCallback``. Both use the default
``GuardConfig`` unless the caller passes one: the zoo measures what a new user gets.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

def _halted_error():
    from lossguard.guard import TrainingHalted

    return TrainingHalted


HALTED = _halted_error()
"""The exception a halted plain-loop run raises out of ``guard.batches``."""

INTERVENTION_EVENTS = {"skip": "skips", "rollback": "rollbacks", "lr_cut": "lr_cuts", "halt": "halts"}
"""Decision record ``event`` names -> :class:`Outcome` counters."""


UPDATE_SIZE_ENV = "LOSSGUARD_ZOO_UPDATE_SIZE"
"""Set (to anything) in the environment: plain-loop guarded runs also get the opt-in
:class:`~lossguard.guard.update_size.UpdateSizeTest` (``benchmarks/zoo.py --update-size``; an
environment variable so that the worker processes see it)."""


def make_guard(model, optimizer, *, scheduler, sampler, workdir: Path, config=None):
    """The StabilityGuard of a plain-loop zoo run (checkpoints and log under ``workdir``)."""
    import os

    from lossguard.checkpoint.store import CheckpointStore
    from lossguard.guard import StabilityGuard

    treatment = None
    if os.environ.get(UPDATE_SIZE_ENV):
        from lossguard.guard.update_size import UpdateSizeTest
        treatment = UpdateSizeTest()
    return StabilityGuard(model, optimizer, scheduler=scheduler, sampler=sampler,
                          store=CheckpointStore(workdir / "ckpt"), log_path=workdir / "guard.jsonl",
                          config=config, treatment=treatment)


from lossguard.distributed.restart import ExitCode  # noqa: E402

EXIT_ROLLBACK, EXIT_HALT = int(ExitCode.ROLLBACK), int(ExitCode.HALT)
"""``ExitCode.ROLLBACK`` / ``ExitCode.HALT`` (``lossguard.distributed.restart``): how the HF callback
ends a process whose rollback needs a relaunch, or whose run halted for good."""


def checkpoint_every(config=None) -> int | None:
    """How often a framework run saves checkpoints for the guard to roll back to (the config's)."""
    from lossguard.guard import GuardConfig

    return (config or GuardConfig()).checkpoint_every


def make_hf_callback(*, workdir: Path, config=None):
    """The HF ``StabilityCallback`` of an HF zoo run."""
    from lossguard.integrations.hf import StabilityCallback

    return StabilityCallback(config, log_path=workdir / "guard.jsonl")


def tally(events: list[dict[str, Any]], halted: bool) -> dict[str, Any]:
    """Counts of the guard's decisions (``skips``, ``rollbacks``, ``lr_cuts``, ``halted``), the steps it
    skipped, and ``(step, event, reasons)`` of every decision."""
    out: dict[str, Any] = {"skips": 0, "rollbacks": 0, "lr_cuts": 0, "halted": bool(halted),
                           "skipped_steps": [], "reasons": []}
    for e in events:
        kind = e.get("event")
        if kind is None:
            continue  # a metric record
        if kind in INTERVENTION_EVENTS and kind != "halt":
            out[INTERVENTION_EVENTS[kind]] += 1
        if kind == "skip":
            out["skipped_steps"].append(int(e["step"]))
        if kind == "halt":
            out["halted"] = True
        out["reasons"].append([int(e.get("step", -1)), kind, list(e.get("reasons", []))])
    return out


def record_decisions(out, events: list[dict[str, Any]], halted: bool) -> None:
    """Fill an :class:`Outcome`'s guard fields from the guard's events (see :func:`tally`)."""
    t = tally(events, halted)
    out.skips, out.rollbacks, out.lr_cuts, out.halted = t["skips"], t["rollbacks"], t["lr_cuts"], t["halted"]
    out.reasons = t["reasons"]
    if out.fault_steps:
        out.fault_skipped = out.fault_steps[0] in t["skipped_steps"]
