"""StabilityGuard: sees each step before the optimizer applies it, skips it, rolls back, or halts.

A plain loop::

    guard = StabilityGuard(model, opt, store=CheckpointStore("ckpt"), sampler=sampler,
                           scheduler=sched, log_path="run.jsonl")
    for step, batch in guard.batches(loader, steps=10_000):
        loss = model(batch)
        loss.backward()
        guard.step(loss)              # clip, judge, optimizer.step (or not), scheduler, zero_grad

The **judge** (:mod:`.judge`) makes a typed :class:`Verdict`, the **policy**
(:class:`lossguard.recovery.RecoveryPolicy`, pure) decides, the **executor** (:mod:`.executor`)
acts. This class wires them to the loop, one module per job (wiring, data_feed, step_stats,
apply_update, host_copy, host_side, act_on_verdict, framework_step, saves, timeline_state). The
*timeline* (:meth:`state_dict`) is rolled back with every checkpoint; the :class:`RunLedger`
(budgets, skipped data, LR cuts) never is. Accounting: the table in ``docs/guard.md``.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from ..checkpoint.protocol import check_store
from ..checkpoint.snapshot import HostSnapshot
from ..errors import require
from ..recovery.ledger import RunLedger
from ..recovery.lr_phase import LrRamp
from ..recovery.policy import RecoveryPolicy
from ..recovery.verdict import Verdict
from .act_on_verdict import act_on_verdict
from .apply_update import apply_update
from .config import GuardConfig
from .data_feed import DataFeed
from .events import EventLog
from .executor import RecoveryExecutor, TrainingHalted
from .framework_precursors import FrameworkPrecursors, drain_precursors
from .framework_step import framework_step
from .host_copy import VerdictTransfer
from .host_side import read_step
from .precursor_hook import make_monitor
from .saves import GuardSaves
from .step_stats import StepStats
from .timeline import TimelineSlot
from .timeline_state import load_timeline, timeline_state
from .withheld import WithheldStreak
from .wiring import (choose_gate, defers_host_read, diagnosis_file, make_judge, make_namer, make_train_state,
                     open_ledger, world_and_rank)

__all__ = ["StabilityGuard"]


class StabilityGuard:
    """Guards a PyTorch training loop: skip a bad step, roll back + skip data, cut the LR, reset the
    loss scale, or halt with a diagnosis.

    Args:
        model: the module being trained (a DDP wrapper is fine; its ``.module`` is checkpointed).
        optimizer: any ``torch.optim`` optimizer; :class:`SkipStepAdamW` enables the sync-free gate.
        store: a :class:`CheckpointStore`; needed for rollbacks; its directory holds ``ledger.json``
            (an existing ledger is loaded: the run is being resumed). Under DDP give every rank its own.
        sampler: the data position (e.g. :class:`ResumableSampler`); with it a rollback rewinds the
            data and a skip is O(1). Without it the stream is not rewound and skips discard batches.
        scheduler: LR scheduler, stepped once per step (skipped or not).
        scaler: ``torch.amp.GradScaler`` for fp16; pass the unscaled ``loss`` to :meth:`step`.
        config: thresholds, budgets and recipe.
        log_path: the run's JSONL log (decisions and per-step metrics; rank 0 only).
        diagnosis_path: where a halt writes its diagnosis (default: beside the log, or the store).
        ledger: the run ledger to use (default: ``<store>/ledger.json``, or in memory).
        snapshots: keep host-memory copies (:class:`lossguard.checkpoint.HostSnapshot`) of the last N
            checkpoints (a rollback to one reads no file; ``rollback_distance`` back needs ``N >=
            rollback_distance // checkpoint_every + 2``). Memory: N model + optimizer states. 0: off.
        attribution: a :class:`lossguard.guard.sample_namer.SampleAttribution`: on every withheld
            step, replay its batch and put the samples carrying the excess on the skip list; it turns
            the deferred host read off unless ``defer_host_read=True`` (:func:`.wiring.defers_host_read`).
        precursors: True, or a :class:`~lossguard.guard.precursors.PrecursorMonitor`: measure the
            precursor statistics (attention / output logits, update ratio, Adam's ratio) and log
            them with each step's metrics, in the same one transfer per step (framework mode: see
            :meth:`after_optimizer_step`).
        treatment: opt-in responders to the precursors (implies ``precursors``), one or a list:
            :class:`~lossguard.guard.treatment.PrecursorTreatment` (QK-clip, then an LR cut, driven by
            the attention logits), :class:`~lossguard.guard.update_size.UpdateSizeTest` (an LR cut
            when the update size jumps against its own history).

    Raises:
        TrainingHalted: the ledger says this run was halted (a relaunch after a halt); the message has
            the diagnosis, the checkpoint to resume from and how to override (:mod:`lossguard.guard.halted`).
    """

    def __init__(self, model, optimizer, *, store=None, sampler=None, scheduler=None, scaler=None,
                 config: GuardConfig | None = None, log_path=None, diagnosis_path=None,
                 ledger: RunLedger | None = None, snapshots: int = 0, attribution=None,
                 precursors=None, treatment=None) -> None:
        torch = require("torch", "torch", "StabilityGuard")
        check_store(store)
        self.config = cfg = config or GuardConfig()
        self.model, self.optimizer, self.scheduler, self.scaler = model, optimizer, scheduler, scaler
        self.store, self.sampler = store, sampler
        params = [p for p in model.parameters() if p.requires_grad]
        self._timeline = TimelineSlot(self)
        self._lr_ramp = LrRamp(cfg.lr_ramp_window)
        device = params[0].device if params else torch.device("cpu")
        self.gate = choose_gate(cfg, optimizer)
        world, self.rank = world_and_rank()
        self.log = EventLog(log_path if self.rank == 0 else None)
        self.judge = make_judge(cfg, device, has_scaler=scaler is not None)
        self.stats = StepStats(self.judge, params, config=cfg, optimizer=optimizer, scaler=scaler, world=world,
                               sharded=any(hasattr(p, "to_local") for p in params))  # FSDP2: DTensor shards
        self.transfer = VerdictTransfer(deferred=defers_host_read(cfg, device, attribution=attribution is not None))
        self.policy = RecoveryPolicy(cfg, ledger=open_ledger(ledger, store), has_scaler=scaler is not None)
        self.namer = make_namer(attribution, model=model, sampler=sampler, store=store, log=self.log,
                                ledger=lambda: self.policy.ledger, world=world, sharded=self.stats.sharded)
        """The :class:`SampleNamer` (None without ``attribution``); ``namer.records`` lists the suspects."""
        self.feed = DataFeed(sampler, capture_rng=(cfg.replay or self.namer is not None) and not self.transfer.deferred)
        self.state = make_train_state(model, optimizer, store=store, scheduler=scheduler, scaler=scaler,
                                      sampler=sampler, timeline=self._timeline)
        self.snapshot = HostSnapshot(self.state, every=1, keep=snapshots) if snapshots else None
        self.saves = GuardSaves(store, self.state, self.snapshot, self.log)
        self.executor = RecoveryExecutor(config=cfg, policy=self.policy, log=self.log, state=self.state, store=store,
                                         optimizer=optimizer, scaler=scaler,
                                         diagnosis_file=diagnosis_file(log_path, diagnosis_path, store),
                                         write_files=self.rank == 0, snapshot=self.snapshot)
        self.precursors, self.treatment = make_monitor(model, optimizer, precursors, treatment), treatment
        self.framework_precursors = FrameworkPrecursors() if self.precursors is not None else None
        self.withheld = WithheldStreak(None if cfg.shadow else cfg.max_withheld_streak)
        """Consecutive withheld updates (timeline state); halts at ``max_withheld_streak``."""
        self.step_count = 0
        """The step the next batch feeds (skipped steps count; a rollback sets it back)."""
        self.halted = False
        self.restart_requested = False  # framework mode: a rollback was booked for a restarted process
        self._held: list = []     # framework mode: the step's micro-batches so far (references)
        self.last_record: Verdict | None = None  # the verdict of the latest processed step

    # ------------------------------------------------------------------ views
    @property
    def ledger(self) -> RunLedger:
        """The run ledger (budgets, skipped data, LR cuts, history; never rolled back)."""
        return self.policy.ledger

    @property
    def diagnosis(self) -> str | None:
        """The halt diagnosis (None unless halted)."""
        return self.executor.diagnosis

    @property
    def events(self) -> list[dict[str, Any]]:
        """The decision records written by this process, in order."""
        return self.log.records

    @property
    def batch_index(self) -> int:
        """Data-stream index of the batch last yielded by :meth:`batches`."""
        return self.feed.batch_index

    # ------------------------------------------------------------------ data
    def batches(self, loader: Iterable, *, steps: int | None = None) -> Iterator[tuple[int, Any]]:
        """Yield ``(step, batch)`` from ``loader``, skipping the data ranges in the ledger.

        Args:
            loader: any iterable of batches (re-iterated at its end when ``steps`` is given, and
                after a rollback so the restored data position takes effect).
            steps: stop when the step counter reaches this; None = one pass over ``loader``.

        Raises:
            TrainingHalted: the guard halted the run (with ``halt_raises``; else the loop just ends).
        """
        cfg = self.config
        if steps is not None:
            self.policy.run_steps = steps  # bounds the skip margin (RecoveryRecipe.margin_for)
        if self.store is not None and cfg.checkpoint_every \
                and self.store.newest_at_or_before(self.step_count) is None:
            self.save()  # a rollback target from the very start

        def more() -> bool:
            return (steps is None or self.step_count < steps) and not self.halted
        skip_to = None if cfg.shadow else self.policy.skip_to  # shadow mode skips no data
        for batch in self.feed.iterate(loader, more=more, skip_to=skip_to, endless=steps is not None):
            yield self.step_count, batch
        self.flush()
        if self.halted and cfg.halt_raises:
            raise TrainingHalted(self.diagnosis or "halted", path=self.executor.diagnosis_file,
                                 fix="fix the cause named above, then resume from the checkpoint it names")

    # ------------------------------------------------------------------ the step
    def step(self, loss, *, replay: Callable[[], Any] | None = None) -> None:
        """Judge this step and apply its update only if it is good; then step the scheduler and
        zero the gradients. Call after ``loss.backward()`` instead of ``optimizer.step()``.

        Args:
            loss: this rank's loss (a tensor); under DDP the guard averages it over ranks.
            replay: optional zero-argument callable that recomputes the loss on the same batch
                (e.g. ``lambda: model(x, y)``); used for the replay check on a flagged step.
        """
        import torch

        if self.halted:
            return
        with torch.no_grad():
            j, ramp = self.stats.judge_step_in_ramp(loss, self.step_count, self.policy, self._lr_ramp)
            packed, lr_used, scale = apply_update(self, j)
        # A deferred verdict arrives after the next update: too late to replay the batch.
        meta = {**self.feed.step_meta(self.step_count, lr=lr_used, loss_scale=scale, replay=replay,
                                      replayable=not self.transfer.deferred), "in_lr_ramp": ramp}
        self._advance()
        ready = self.transfer.push(packed, meta)
        if ready is not None:
            self._process(*ready)
        every = self.config.checkpoint_every
        if (self.store is not None and every and not self.halted
                and self.step_count % every == 0 and not self.feed.reiterate):
            self.save()
        elif self.saves.inflight is not None:
            self.poll_save()

    def before_optimizer_step(self, loss) -> bool:
        """Framework mode (Lightning, HF, ... call ``optimizer.step()``): judge this step, after backward,
        before the optimizer step. True if the update may be applied (always in shadow mode or once halted);
        a bad step's gradients are dropped; a rollback is booked for a restarted process (:mod:`.framework_step`)."""
        return framework_step(self, loss)

    def after_optimizer_step(self) -> None:
        """Framework mode, after ``optimizer.step()``: pack its precursors (:mod:`.framework_precursors`)."""
        if self.framework_precursors is not None:
            self.framework_precursors.after_step(self)

    def hold_batch(self, batch) -> None:
        """Framework mode: a (micro-)batch of the step in flight (a reference; a callback passes
        each one at batch start), so a withheld step's samples can be named (``attribution``)."""
        self._held.append(batch)

    def _advance(self) -> None:
        self.step_count += 1
        self.state.step = self.step_count

    def _process(self, packed, meta: dict) -> None:
        """Host side of one step: verdict -> log -> (replay check) -> policy -> executor."""
        v, transient = read_step(self, packed, meta)
        act_on_verdict(self, v, transient=transient, responses=meta.get("responses", ()))

    def flush(self) -> None:
        """Process the deferred verdict of the last step (on CUDA with ``defer_host_read``)."""
        ready = self.transfer.drain()
        if ready is not None:
            self._process(*ready)
        drain_precursors(self)  # framework mode: the last optimizer step's precursors

    # ------------------------------------------------------------------ checkpoints and state
    def save(self) -> Any:
        """Checkpoint the whole training state (model, optimizer, ..., this guard's timeline)."""
        self.flush()
        if self.config.loss_rise is not None:  # the loss-rise rule's target must survive pruning
            self.executor.keep_target(self.policy.level.get("best_step"))
        self.state.step = self.step_count
        return self.saves.save(self.step_count)

    @property
    def pending_save(self):
        """The asynchronous save in flight (a :class:`lossguard.checkpoint.PendingSave`: ``done()``,
        ``wait()``, ``seconds``), or None when there is none or it was already logged as finished."""
        return self.saves.inflight

    def poll_save(self, *, wait: bool = False) -> None:
        """Log the completion of the asynchronous save in flight once it is done (``wait``: block
        for it). Called at every step and save and at :meth:`close`; never blocks unless asked."""
        self.saves.poll(wait=wait)

    def restore(self, step: int | None = None) -> int:
        """Resume from the store; returns the step.

        Args:
            step: the checkpoint to load. None = the ledger's ``resume_from`` if a previous process
                left one (a rollback booked but not finished: a framework restart, or a crash
                mid-rollback), finished as the in-process rollback would have (:meth:`GuardSaves.resume`);
                else the newest valid.
        """
        self.saves.resume(step, self.executor)
        self.step_count = self.state.step
        self.feed.reiterate = True
        return self.step_count

    def state_dict(self) -> dict[str, Any]:
        """The timeline: detector windows, the policy's open episode, the data counter (JSON-safe).
        Goes into every checkpoint (TrainState extras) and is rolled back with it."""
        return timeline_state(self)

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (format 1, from before the ledger, is read too)."""
        load_timeline(self, sd)

    def adopt_ledger(self, ledger: RunLedger) -> None:
        """Use ``ledger`` from now on (a framework callback restoring its own saved ledger)."""
        ledger.path = self.ledger.path if ledger.path is None else ledger.path
        self.policy.ledger = open_ledger(ledger, None)  # a halted run's ledger is final, as at construction

    def close(self) -> None:
        """Process any deferred verdict, wait for an asynchronous save in flight, close the log."""
        self.flush()
        self.poll_save(wait=True)
        if self.store is not None:
            self.store.wait()
        self.log.close()
