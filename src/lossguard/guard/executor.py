"""The executor: carries out the policy's decisions on what it is given, and writes each one down.

It acts on the objects it receives at construction -- the checkpoint store, the
:class:`TrainState`, the optimizer, the GradScaler, the event log, the policy (whose ledger it
persists) -- and on nothing else: it never reaches into the guard. A rollback restores the
checkpoint through the TrainState (which holds the guard's *timeline* state: detector windows, the
open episode) and books the rollback in the :class:`RunLedger`, which the checkpoint does not hold:
the budget survives the rollback without being saved and put back by hand.

Where the rollback cannot happen in this process (``in_process_rollback=False``: a framework owns
the data loader), the executor halts instead and records the target in ``ledger.resume_from`` so a
restarted process (or a person) can carry it out.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import LossguardError
from ..recovery.action import Action
from ..recovery.checkpoint_choice import choose_checkpoint
from ..recovery.decision import Decision
from ..recovery.policy import RecoveryPolicy
from ..recovery.resolve import halt_resume_point, loss_scale_reset_with, resolve_rollback
from .config import GuardConfig
from .events import EventLog


class TrainingHalted(LossguardError):
    """The guard stopped the run: the rollback budget is spent (the message has the diagnosis)."""


@dataclass
class Outcome:
    """What carrying out one decision did to the run.

    Attributes:
        rolled_back_to: the checkpoint step restored (None: no rollback happened).
        halted: the run is halted.
    """

    rolled_back_to: int | None = None
    halted: bool = False
    restart: bool = False
    """The rollback is left to a restarted process (framework mode): stop, and exit with
    :attr:`lossguard.distributed.restart.ExitCode.ROLLBACK`."""


class RecoveryExecutor:
    """Carries out skip / rollback / LR cut / loss-scale reset / halt decisions.

    Args:
        config: the guard's configuration.
        policy: the policy (its ledger is booked and persisted here).
        log: the event log.
        state: the :class:`TrainState` a rollback loads (None: no rollback possible).
        store: the :class:`CheckpointStore` (None: no rollback possible).
        optimizer: checked finite before a loss-scale reset.
        scaler: the GradScaler a loss-scale reset acts on (or None).
        diagnosis_file: where a halt writes its diagnosis (None: only into the log).
        write_files: this rank writes the diagnosis (rank 0).
        in_process_rollback: False under a framework that owns the data loader (halts instead).
        snapshot: a :class:`lossguard.checkpoint.HostSnapshot` holding copies of recent checkpoints;
            a rollback to one of them restores it from host memory instead of reading the store.
    """

    def __init__(self, *, config: GuardConfig, policy: RecoveryPolicy, log: EventLog, state=None, store=None,
                 optimizer=None, scaler=None, diagnosis_file: Path | None = None, write_files: bool = True,
                 in_process_rollback: bool = True, snapshot=None) -> None:
        self.config, self.policy, self.log = config, policy, log
        self.state, self.store, self.optimizer, self.scaler = state, store, optimizer, scaler
        self.diagnosis_file, self.write_files = diagnosis_file, write_files
        self.in_process_rollback = in_process_rollback
        self.snapshot = snapshot
        self._rollback_targets: set[int] = set()  # protected because a rollback went (or will go) there
        self._kept: int | None = None  # protected by keep_target() for a possible loss-rise rollback
        self.diagnosis: str | None = None

    @property
    def ledger(self):
        """The run ledger (the policy's)."""
        return self.policy.ledger

    # ---------------------------------------------------------------- dispatch
    def carry_out(self, d: Decision) -> Outcome:
        """Carry out one decision and log it."""
        if d.action is Action.ROLLBACK:
            return self._rollback(d)
        if d.action is Action.HALT:
            return self._halt(d)
        if d.action is Action.LOSS_SCALE_RESET and not self.config.shadow:
            from .gate import optimizer_state_finite
            if not optimizer_state_finite(self.optimizer):
                return self.carry_out(self.policy.escalate(d.step, "optimizer state is not finite: a loss-scale "
                                                                   "reset cannot help"))
            from ..techniques.loss_scale import reset_grad_scaler
            self.emit(d, new_scale=reset_grad_scaler(self.scaler, self.config.loss_scale_reset_to))
            return Outcome()
        self.emit(d)
        if d.action is Action.SKIP:
            self.ledger.save()  # skip counts: cheap, rare, and a restart should see them
        return Outcome()

    def emit(self, d: Decision, **extra: Any) -> None:
        """Write the decision's event record (plus ``extra``); future-changing ones go to the ledger too."""
        rec = d.record()
        rec.update(extra)
        if self.config.shadow:
            rec["shadow"] = True
        self.log.event(rec)
        if d.action.changes_future:
            self.ledger.note(rec)

    def checkpoints(self) -> list[int] | None:
        """The checkpoint steps every rank agrees on (a sharded store's come from rank 0, so every
        rank picks the same target); None without a store."""
        return None if self.store is None else self.store.agreed_steps()

    def target(self, onset: int) -> int | None:
        """The rollback target for an episode starting at ``onset`` (:func:`choose_checkpoint`)."""
        steps = self.checkpoints()
        return None if steps is None else choose_checkpoint(onset, steps, self.config.recipe.rollback_distance)

    def keep_target(self, onset: int | None) -> None:
        """Keep the rollback target of a possible episode at ``onset`` safe from pruning.

        The loss-rise rule rolls back to before the loss's lowest point, which can lie further back
        than keep-last-k pruning keeps; without this, the live guard would halt ("no checkpoint")
        where :func:`lossguard.simulate.simulate` rolls back. Called before each save with the
        lowest point's step; the previous such target is released unless a rollback protected it.
        """
        target = None if onset is None or self.store is None else self.target(int(onset))
        if target == self._kept:
            return
        if self._kept is not None and self._kept not in self._rollback_targets:
            self.store.unprotect(self._kept)
        if target is not None:
            self.store.protect(target)
        self._kept = target

    # ---------------------------------------------------------------- actions
    def _rollback(self, d: Decision) -> Outcome:
        # The one resolver (recovery/resolve.py), as in ``lossguard simulate``: target or halt, same words.
        r = resolve_rollback(d, self.checkpoints(), self.config.recipe,
                             can_restore=self.state is not None or not self.in_process_rollback,
                             framework=not self.in_process_rollback)
        if self.config.shadow:
            self.emit(d, would_roll_back_to=r.target)
            for f in self.policy.rolled_back(d, d.step):
                self.emit(f)
            return Outcome()
        target = r.target
        if r.halts or target is None:  # a halt has no target
            return self._halt(r.decision)
        if not self.in_process_rollback:
            return self._rollback_by_restart(d, target)
        from_memory = self.snapshot is not None and target in self.snapshot.steps
        # 1. Book it, before anything changes: a crash from here on resumes at the target with
        #    the skip range, budget and LR cut in force (guard.restore() reads resume_from).
        self._book(d, target, source="memory" if from_memory else "disk")
        # 2. The abandoned timeline's checkpoints become unreachable to restore().
        self.abandon_newer(target)
        # 3. The target's state (the timeline only: the ledger is in neither checkpoint nor snapshot).
        t0 = time.perf_counter()
        if from_memory:
            self.snapshot.restore(target)
        else:
            self.state.restore(self.store, target)
        self.log.timing({"step": target, "event": "checkpoint_load", "source": "memory" if from_memory else "disk",
                         "seconds": round(time.perf_counter() - t0, 6)})
        # 4. As a rollback leaves the timeline; then the newest checkpoint is the target itself.
        self.after_restore(target)
        self.ledger.resume_from = None
        self.ledger.save()
        return Outcome(rolled_back_to=target)

    def _book(self, d: Decision, target: int, **extra: Any) -> None:
        """Step 1 of every rollback: protect the target, name it in ``ledger.resume_from``, book the
        budget, skip range and LR cut (:meth:`RecoveryPolicy.rolled_back`) and write the ledger."""
        self.store.protect(target)
        self._rollback_targets.add(target)
        self.ledger.resume_from = target
        follow = self.policy.rolled_back(d, target)
        self.emit(d, to_step=target, **extra)
        for f in follow:
            self.emit(f)
        self.ledger.save()

    def abandon_newer(self, target: int) -> None:
        """Step 2: remove the checkpoints (and host snapshots) newer than ``target``, the abandoned
        timeline's (every rank calls it; a sharded store coordinates its ranks itself)."""
        removed = self.store.supersede_after(target) if hasattr(self.store, "supersede_after") else []
        if self.snapshot is not None:
            self.snapshot.discard_after(target)
        if removed:
            self.log.event({"step": target, "event": "checkpoints_superseded", "steps": sorted(removed)})

    def after_restore(self, target: int) -> None:
        """Step 4: the restored timeline as a rollback leaves it (no open episode; the loss scale
        reset when the recipe says so). The in-process rollback and a process resuming a booked
        rollback (:meth:`StabilityGuard.restore`) both call it, so their runs are the same."""
        self.policy.reset_timeline(self.ledger.last_rollback)
        if self.scaler is not None and self.config.recipe.reset_loss_scale:
            from ..techniques.loss_scale import reset_grad_scaler
            from .gate import optimizer_state_finite
            if optimizer_state_finite(self.optimizer):
                new = reset_grad_scaler(self.scaler, self.config.loss_scale_reset_to)
                self.emit(loss_scale_reset_with(target, {"new_scale": new}))

    def _rollback_by_restart(self, d: Decision, target: int) -> Outcome:
        """Framework mode: book the rollback in the ledger (skip range, budget, LR cut) and name the
        checkpoint in ``ledger.resume_from``; the process then exits with ExitCode.ROLLBACK and the
        relaunched one resumes from that checkpoint and skips the batches (docs/large-runs.md). The
        framework's checkpoints newer than the target are removed now and again when the relaunched
        script asks :func:`lossguard.integrations.resume_checkpoint` (any written on the way out)."""
        from ..distributed.restart import ExitCode

        self._book(d, target, restart=True, exit_code=int(ExitCode.ROLLBACK))
        self.abandon_newer(target)
        return Outcome(halted=True, restart=True)

    def _halt(self, d: Decision) -> Outcome:
        onset = d.numbers.get("onset", d.step)
        resume = halt_resume_point(d, self.checkpoints(), self.config.recipe)
        led = self.ledger
        lines = [f"lossguard halted the run at step {d.step}.", "Why:"] + [f"  - {r}" for r in d.reasons] + [
            f"Episode onset: step {onset}; rollbacks done: {led.rollbacks}; steps skipped: {led.skips} "
            f"({led.transients} transient).",
            f"Data ranges skipped (batch indices, half-open): {[r.to_json() for r in led.skip_ranges] or 'none'}.",
            (f"Resume from checkpoint step {resume}: {self.store.path_of(resume)}" if resume is not None
             else "No checkpoint before the episode is available."),
            "Before resuming: lower the LR, check the data around the episode's batches, "
            "or raise rollbacks_per_incident / max_rollbacks."]
        self.diagnosis = "\n".join(lines)
        path = None if self.config.shadow else self.diagnosis_file
        if path is not None and self.write_files:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.diagnosis + "\n", encoding="utf-8")
        if not self.config.shadow:
            led.halted = True
        self.emit(d, resume_from=resume, diagnosis=None if path is None else str(path))
        return Outcome(halted=not self.config.shadow)
