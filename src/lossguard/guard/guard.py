"""StabilityGuard: sees each step before the optimizer applies it, skips it, rolls back, or halts.

A plain loop::

    guard = StabilityGuard(model, opt, store=CheckpointStore("ckpt"), sampler=sampler,
                           scheduler=sched, log_path="run.jsonl")
    for step, batch in guard.batches(loader, steps=10_000):
        loss = model(batch)
        loss.backward()
        guard.step(loss)              # clip, judge, optimizer.step (or not), scheduler, zero_grad

Three parts, one concept each: the **judge** (:mod:`.judge`: loss and grad norm -> a typed
:class:`Verdict`, on the device or the host), the **policy** (:class:`lossguard.recovery.RecoveryPolicy`,
pure) and the **executor** (:mod:`.executor`: carries decisions out on the store, state, scaler and
log it was given). This class only wires them to the training loop.

State: the *timeline* (detector windows, the open episode, the data counter) is this object's
:meth:`state_dict`, saved inside every checkpoint and rolled back with it; the
:class:`RunLedger` (budgets, skipped data, LR cuts, history) is never rolled back and lives in
``<store>/ledger.json`` (in memory without a store).

Accounting (``docs/guard.md`` has the table): a skipped step consumes its batch and counts as a step
(the step counter and the LR schedule advance; Adam's ``t``, weights and moments do not change). A
rollback restores step counter, model, optimizer, scheduler, GradScaler, RNG, data position and the
timeline; the data stream then skips the episode's half-open batch range when it reaches it.

Device work per step: the global gradient norm, two ring-buffer median/MAD updates, the finite
checks and the verdict, packed into one small tensor copied to the host once -- immediately on CPU,
one step late on CUDA (``defer_host_read``), where a rollback therefore acts one step late.
"""
from __future__ import annotations

import math
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..data.iterate import iter_rng_neutral
from ..errors import require
from ..recovery.ledger import LEDGER_FILE, RunLedger
from ..recovery.lr_phase import LrRamp
from ..recovery.policy import RecoveryPolicy
from ..recovery.verdict import Verdict
from .config import GuardConfig
from .events import EventLog
from .executor import RecoveryExecutor, TrainingHalted
from .judge.evidence import ramp_clipped
from .precursor_hook import load_responders_state, responders, responders_state
from .judge.twins import DeviceJudge, HostJudge, Judgement
from .timeline import TimelineSlot

GUARD_FORMAT = 2
"""Version of :meth:`StabilityGuard.state_dict` (2: timeline only; the ledger lives apart)."""

__all__ = ["GUARD_FORMAT", "StabilityGuard", "TrainingHalted", "restore_lr", "scale_lr"]


def scale_lr(optimizer, factor: float) -> list:
    """Multiply every param group's LR by ``factor`` for one optimizer step (the ledger's LR cut on
    top of what the scheduler set for this step). The plain loop and the framework callbacks all
    use this, then :func:`restore_lr` right after the step: the scheduler -- chainable ones like
    ``ExponentialLR`` compute from the current value -- then steps from the unscaled LR, so a cut
    never compounds across steps.

    Args:
        optimizer: a ``torch.optim`` optimizer (or a wrapper exposing ``param_groups``).
        factor: the multiplier (``policy.lr_factor(step)``); 1.0 leaves the groups untouched.

    Returns:
        The groups' LRs before scaling, to pass to :func:`restore_lr`.
    """
    groups = optimizer.param_groups
    saved = [g["lr"] for g in groups]
    if factor != 1.0:
        for g in groups:
            g["lr"] = g["lr"] * factor
    return saved


def restore_lr(optimizer, saved: list) -> None:
    """Put back the LRs :func:`scale_lr` returned (call right after the optimizer step)."""
    for g, lr in zip(optimizer.param_groups, saved):
        g["lr"] = lr


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
        snapshots: keep host-memory copies (:class:`lossguard.checkpoint.HostSnapshot`) of the last
            N checkpoints the guard saves; a rollback to one of them reads no file. A rollback
            ``rollback_distance`` back needs ``N >= rollback_distance // checkpoint_every + 2``.
            Memory: N copies of this rank's model + optimizer state. 0: off.
        attribution: a :class:`lossguard.guard.sample_namer.SampleAttribution`: on every withheld
            step, replay its batch, name the samples carrying the excess and put them on the skip
            list (``<store>/skiplist.json``, honoured by the sampler). On CUDA it turns the deferred
            host read off unless ``defer_host_read=True`` (a deferred verdict arrives after the
            next update, when the batch can no longer be replayed on the weights that saw it).
        precursors: True, or a :class:`~lossguard.guard.precursors.PrecursorMonitor`: measure the
            precursor statistics (attention / output logits, update ratio, Adam's ratio) and log
            them with each step's metrics, in the same one transfer per step.
        treatment: opt-in responders to the precursors (implies ``precursors``), one or a list:
            :class:`~lossguard.guard.treatment.PrecursorTreatment` (QK-clip, then an LR cut, driven by
            the attention logits), :class:`~lossguard.guard.update_size.UpdateSizeTest` (an LR cut
            when the update size jumps against its own history).

    Raises:
        TrainingHalted: the ledger says this run was halted (a relaunch after a halt); the message
            has the saved diagnosis, the checkpoint to resume from, and how to override
            (:meth:`RunLedger.clear_halt`; see :mod:`lossguard.guard.halted`).
    """

    def __init__(self, model, optimizer, *, store=None, sampler=None, scheduler=None, scaler=None,
                 config: GuardConfig | None = None, log_path=None, diagnosis_path=None,
                 ledger: RunLedger | None = None, snapshots: int = 0, attribution=None,
                 precursors=None, treatment=None) -> None:
        torch = require("torch", "torch", "StabilityGuard")
        from ..checkpoint.protocol import check_store
        from ..checkpoint.state import TrainState
        from .gate import supports_device_gate

        check_store(store)
        self.config = cfg = config or GuardConfig()
        self.model, self.optimizer, self.scheduler, self.scaler = model, optimizer, scheduler, scaler
        self.store, self.sampler = store, sampler
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._timeline = TimelineSlot(self)
        self._lr_ramp = LrRamp((config or GuardConfig()).lr_ramp_window)
        device = self._params[0].device if self._params else torch.device("cpu")
        if cfg.gate == "device" and not supports_device_gate(optimizer):
            from ..errors import ConfigError
            raise ConfigError(f"gate='device' needs an optimizer whose step() takes gate=; "
                              f"{type(optimizer).__name__} does not",
                              fix="use lossguard.guard.SkipStepAdamW, or gate='host'")
        self.gate = "device" if cfg.gate == "device" or (cfg.gate == "auto" and supports_device_gate(optimizer)) else "host"
        dist = torch.distributed
        self._world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        self.rank = dist.get_rank() if self._world > 1 else 0
        self.log = EventLog(log_path if self.rank == 0 else None)
        host = cfg.stats == "host" or (cfg.stats == "auto" and device.type == "cpu")
        judge_args = dict(evidence=cfg.evidence, has_scaler=scaler is not None, shadow=cfg.shadow)
        self.judge = (HostJudge(cfg.loss, cfg.grad_norm, **judge_args) if host
                      else DeviceJudge(cfg.loss, cfg.grad_norm, device=device, **judge_args))
        # Deferring the host read only makes sense when the statistics live on the device.
        self._defer = not host and (cfg.defer_host_read if cfg.defer_host_read is not None
                                    else device.type == "cuda" and attribution is None)
        if ledger is None:
            ledger = RunLedger.open(Path(store.directory) / LEDGER_FILE if store is not None else None)
        if ledger.halted:  # a relaunch after a halt: the halt is final until a person clears it
            from .halted import halted_error
            raise halted_error(ledger)
        self.policy = RecoveryPolicy(cfg, ledger=ledger, has_scaler=scaler is not None)
        # FSDP2: parameters are DTensors (each rank holds shards). Statistics then come from the
        # local shards in one packed all-reduce, and checkpoints go through DCP (a sharded store).
        self._sharded = any(hasattr(p, "to_local") for p in self._params)
        self.namer = None
        """The :class:`SampleNamer` (None without ``attribution``); ``namer.records`` lists the suspects."""
        if attribution is not None:
            from .sample_namer import SampleNamer
            self.namer = SampleNamer.build(attribution, model=model, sampler=sampler, store=store, log=self.log,
                                           ledger=lambda: self.policy.ledger, world=self._world, sharded=self._sharded)
        if store is not None and store.sharded:
            from ..checkpoint.sharded_state import ShardedTrainState
            self.state = ShardedTrainState(model, optimizer, scheduler=scheduler, scaler=scaler, data=sampler,
                                           extras={"guard": self._timeline})
        else:
            self.state = TrainState(getattr(model, "module", model), optimizer, scheduler=scheduler, scaler=scaler,
                                    data=sampler, extras={"guard": self._timeline})
        from ..checkpoint.snapshot import HostSnapshot
        self.snapshot = HostSnapshot(self.state, every=1, keep=snapshots) if snapshots else None
        self.executor = RecoveryExecutor(config=cfg, policy=self.policy, log=self.log, state=self.state, store=store,
                                         optimizer=optimizer, scaler=scaler,
                                         diagnosis_file=self._diagnosis_file(log_path, diagnosis_path, store),
                                         write_files=self.rank == 0, snapshot=self.snapshot)
        from .precursor_hook import make_monitor
        self.precursors, self.treatment = make_monitor(model, optimizer, precursors, treatment), treatment
        from .withheld import WithheldStreak
        self.withheld = WithheldStreak(None if cfg.shadow else cfg.max_withheld_streak)
        """Consecutive withheld updates (timeline state); halts at ``max_withheld_streak``."""
        self.step_count = 0
        """The step the next batch feeds (skipped steps count; a rollback sets it back)."""
        self._judged = 0          # steps judged by this process (the first ones get the sanity bound's scale)
        self.halted = False
        self.restart_requested = False
        """Framework mode: a rollback was booked for a restarted process (exit with ExitCode.ROLLBACK)."""
        self._data_count = 0      # batches drawn from the stream (the data position without a sampler)
        self._batch_index = 0     # data-stream index of the batch in flight
        self._rng = None          # torch RNG when the batch in flight was drawn (replay check)
        self._batch = None        # the batch in flight (a reference, for naming its samples)
        self._held: list = []     # framework mode: the step's micro-batches so far (references)
        self._pending = None      # deferred (packed host copy, meta) of the previous step
        self._reiter = False      # batches() must re-create its iterator (after a rollback)
        self._inflight = None     # the asynchronous save whose completion is not logged yet
        self.last_record: Verdict | None = None
        """The verdict of the latest processed step."""

    @staticmethod
    def _diagnosis_file(log_path, diagnosis_path, store) -> Path | None:
        if diagnosis_path is not None:
            return Path(diagnosis_path)
        if log_path is not None:
            return Path(log_path).with_name(Path(log_path).stem + ".halt.txt")
        return Path(store.directory) / "HALT.txt" if store is not None else None

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
        return self._batch_index

    # ------------------------------------------------------------------ data
    def _next_index(self) -> int:
        return int(self.sampler.position) if self.sampler is not None else self._data_count

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
        it = iter_rng_neutral(loader)
        while (steps is None or self.step_count < steps) and not self.halted:
            if self._reiter:
                it, self._reiter = iter_rng_neutral(loader), False
            end = None if cfg.shadow else self.policy.skip_to(self._next_index())
            if end is not None:
                n = end - self._next_index()
                if self.sampler is not None:
                    self.sampler.skip_batches(n)
                    it = iter_rng_neutral(loader)
                else:
                    for _ in range(n):
                        if next(it, StopIteration) is StopIteration:
                            it = iter_rng_neutral(loader)
                    self._data_count += n
            batch = next(it, StopIteration)
            if batch is StopIteration:
                if steps is None:
                    break
                it = iter_rng_neutral(loader)
                batch = next(it, StopIteration)
                if batch is StopIteration:
                    break
            self._batch_index = int(self.sampler.position) - 1 if self.sampler is not None else self._data_count
            self._data_count += 1
            if (cfg.replay or self.namer is not None) and not self._defer:
                from .replay import capture_torch_rng
                self._rng = capture_torch_rng()
            self._batch = batch
            yield self.step_count, batch
        self.flush()
        if self.halted and cfg.halt_raises:
            raise TrainingHalted(self.diagnosis or "halted", path=self.executor.diagnosis_file,
                                 fix="fix the cause named above, then resume from the checkpoint it names")

    # ------------------------------------------------------------------ the step
    def _judge(self, loss, *, clip: bool, waived: bool = False) -> Judgement:
        """The shared prologue: global loss (one all-reduce under DDP), unscale, grad norm, judge."""
        import torch

        if self._sharded:
            return self._judge_sharded(loss, clip=clip, waived=waived)
        local = loss.detach().to(torch.float64).reshape(())
        glob = local.clone()
        if self._world > 1:
            torch.distributed.all_reduce(glob)  # one small all-reduce: the statistics use the global loss
            glob /= self._world
        if clip and self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        from .gate import grad_norm
        gn = grad_norm(self._params, self.config.max_grad_norm if clip else None).to(torch.float64)
        # The first steps' sanity bound needs a scale before any grad norm was accepted: the
        # parameter norm. Only while the loss test is cold (a host-side step count; no sync later).
        pn = None
        if self._judged < self.config.loss.min_points:
            pn = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.detach().to(torch.float64))
                                                       for p in self._params])) if self._params else None
        self._judged += 1
        if isinstance(self.judge, HostJudge):
            return self.judge.judge(float(glob), float(gn), float(local), math.nan if pn is None else float(pn),
                                    waived)
        return self.judge.judge(glob, gn, local, pn, waived)

    def _judge_sharded(self, loss, *, clip: bool, waived: bool = False) -> Judgement:
        """FSDP2 prologue: loss, grad norm and non-finite flag from the local shards in ONE all-reduce
        (:func:`lossguard.distributed.fsdp.reduce_step_stats`); every rank gets the same numbers and
        therefore the same verdict."""
        import torch

        from ..distributed.fsdp import clip_sharded_grads_, reduce_step_stats

        if clip and self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        warm = self._judged < self.config.loss.min_points
        stats = reduce_step_stats(loss, self._params, param_norm=warm)
        if clip and self.config.max_grad_norm is not None:
            clip_sharded_grads_(self._params, self.config.max_grad_norm, stats.grad_norm)
        self._judged += 1
        local = loss.detach().to(torch.float64).reshape(())
        if isinstance(self.judge, HostJudge):
            pn = math.nan if stats.param_norm is None else float(stats.param_norm)
            return self.judge.judge(float(stats.loss), float(stats.grad_norm), float(local), pn, waived)
        return self.judge.judge(stats.loss, stats.grad_norm, local, stats.param_norm, waived)

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
        cfg, opt = self.config, self.optimizer
        with torch.no_grad():
            saved = scale_lr(opt, self.policy.lr_factor(self.step_count))
            groups = opt.param_groups
            lr_used = float(groups[0]["lr"]) if groups else math.nan
            ramp = self._lr_ramp.update(self.step_count, lr_used)  # in step order, before the verdict
            j = self._judge(loss, clip=True, waived=ramp_clipped(ramp, cfg.max_grad_norm, cfg.lr_ramp_window))
            if self.precursors is not None:
                self.precursors.before_step()
            if self.gate == "device":
                apply = j.apply if torch.is_tensor(j.apply) else torch.tensor(bool(j.apply))
                (self.scaler.step(opt, gate=apply) if self.scaler is not None else opt.step(gate=apply))
            elif cfg.shadow or bool(j.apply):  # host gate: the one sync of this path
                (self.scaler.step(opt) if self.scaler is not None else opt.step())
            restore_lr(opt, saved)
            packed = j.packed
            if self.precursors is not None:
                from .precursor_hook import append_precursors
                self.precursors.after_step()
                packed = append_precursors(self.precursors, packed)
            scale = math.nan
            if self.scaler is not None:
                self.scaler.update()
                scale = float(self.scaler.get_scale())
            if self.scheduler is not None:
                with warnings.catch_warnings():  # a skipped first step is deliberate
                    warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)`")
                    self.scheduler.step()
            opt.zero_grad(set_to_none=True)
        meta = {"step": self.step_count, "batch_index": self._batch_index, "lr": lr_used, "loss_scale": scale,
                "in_lr_ramp": ramp,
                "rng": self._rng, "replay": None if self._defer else replay,
                "batch": None if self._defer else self._batch}
        self._advance()
        if self._defer:
            host = self._copy_to_host(packed)
            prev, self._pending = self._pending, (host, meta)
            if prev is not None:
                self._process(*prev)
        else:
            self._process(packed, meta)
        if (self.store is not None and cfg.checkpoint_every and not self.halted
                and self.step_count % cfg.checkpoint_every == 0 and not self._reiter):
            self.save()
        elif self._inflight is not None:
            self.poll_save()

    def before_optimizer_step(self, loss) -> bool:
        """Framework mode: judge this step when a framework (Lightning, HF, ...) calls
        ``optimizer.step()`` itself. Call after backward, before the optimizer step.

        A bad step's gradients are dropped (``zero_grad(set_to_none=True)``): torch's optimizers skip
        every parameter without a gradient, so weights, moments, Adam's ``t`` and weight decay stay
        exactly as they were. The framework owns the data loader, so where the guard would roll back
        it halts instead, naming the checkpoint and the batches to skip (and writing them to the
        ledger's ``resume_from``).

        Returns:
            True if the update may be applied (always True in shadow mode or once halted).
        """
        import torch

        if self.halted:
            return True
        held, self._held = self._held, []
        self.executor.in_process_rollback = False
        if not self.config.shadow and self.policy.skip_to(self.step_count) is not None:
            # A batch in a range the ledger skips (booked by a rollback before a restart): the
            # framework still feeds it, so its update is withheld and the detectors never see it.
            self.log.event({"step": self.step_count, "event": "skip_data", "batch_index": self.step_count})
            self.optimizer.zero_grad(set_to_none=True)
            self._advance()
            return False
        with torch.no_grad():
            j = self._judge(loss, clip=False)
            bad = bool(j.bad)  # framework mode needs the verdict now: one sync
        lr = float(self.optimizer.param_groups[0]["lr"]) if self.optimizer.param_groups else math.nan
        meta = {"step": self.step_count, "batch_index": self.step_count, "lr": lr,
                "loss_scale": float(self.scaler.get_scale()) if self.scaler is not None else math.nan,
                "rng": None, "replay": None, "batch": None, "precursors": False}
        if held:
            from .micro_batches import MicroBatches
            meta["batch"] = held[0] if len(held) == 1 else MicroBatches(held)
        self._advance()
        self._process(j.packed, meta)
        if bad and not self.config.shadow:
            self.optimizer.zero_grad(set_to_none=True)
        return not bad or self.config.shadow

    def hold_batch(self, batch) -> None:
        """Framework mode: a (micro-)batch of the step in flight (a reference; a callback passes
        each one at batch start), so a withheld step's samples can be named (``attribution``)."""
        self._held.append(batch)

    def _advance(self) -> None:
        self.step_count += 1
        self.state.step = self.step_count

    def _process(self, packed, meta: dict) -> None:
        """Host side of one step: verdict -> log -> (replay check) -> policy -> executor."""
        pre = None
        if self.precursors is not None and meta.get("precursors", True):
            from .precursor_hook import split_precursors
            packed, pre = split_precursors(self.precursors, packed)
        v = Judgement.verdict(packed, step=meta["step"], batch_index=meta["batch_index"], lr=meta["lr"],
                              loss_scale=meta["loss_scale"])
        # the policy's LR-schedule evidence (step() took it before judging; framework mode takes it here)
        v.in_lr_ramp = meta["in_lr_ramp"] if "in_lr_ramp" in meta else self._lr_ramp.update(v.step, v.lr)
        self.last_record = v
        if self.config.log_metrics:
            m = {"loss": v.loss, "grad_norm": v.grad_norm, "lr": v.lr}
            if self.scaler is not None:
                m["loss_scale"] = v.loss_scale
            if pre is not None:
                m.update(self.precursors.decode(pre))
            self.log.metrics(v.step, m)
        if pre is not None and self.treatment is not None and not self.config.shadow:
            for responder in responders(self.treatment):
                for rec in responder.respond(v.step, self.precursors, pre, self.ledger, v.lr):
                    self.log.event(rec)
        transient = False
        # Replay only when the update was withheld: in shadow mode the weights already moved.
        if v.bad and meta["replay"] is not None and meta["rng"] is not None and self.config.replay \
                and not self.config.shadow:
            from .replay import replay_check
            transient = replay_check(v, meta, world=self._world, log=self.log, rtol=self.config.replay_rtol,
                                     device=self._params[0].device if self._params else "cpu")
        if v.bad and not transient and self.namer is not None and not self.config.shadow:
            self.namer.name(step=v.step, batch_index=v.batch_index, batch=meta.get("batch"), rng=meta.get("rng"),
                            baseline=v.loss_baseline, loss_flagged=v.loss_outlier or not math.isfinite(v.loss)
                            or v.loss_z >= self.config.evidence.joint_loss_z)
        with self._timeline.parked():  # a rollback's restore must not reload this guard mid-decision
            for d in self.policy.observe(v, transient=transient):
                data_count = self._data_count
                out = self.executor.carry_out(d)
                if out.rolled_back_to is not None:
                    rollback = d
                    break
                if out.halted:
                    self.halted, self.restart_requested = True, out.restart
                    if self.namer is not None and self.namer.records and self.executor.diagnosis:
                        self._add_to_diagnosis(self.namer.summary())
                    break
            else:
                halt = self.withheld.update(v.step, bool(v.bad) and not self.config.shadow)
                if halt is not None and self.executor.carry_out(halt).halted:
                    self.halted = True
                return
        if out.rolled_back_to is not None:
            # The decision is over: now the restored timeline (detector windows, episode, data
            # counter) replaces this guard's, and the policy starts afresh after the rollback.
            self._timeline.apply()
            self.policy.restart_timeline(rollback)
            self.step_count = self.state.step
            if self.sampler is None:
                self._data_count = data_count  # the stream itself was not rewound
            self._reiter, self._pending = True, None

    def _add_to_diagnosis(self, text: str) -> None:
        """Append ``text`` (the named samples) to the halt diagnosis and its file."""
        ex = self.executor
        ex.diagnosis = f"{ex.diagnosis}\n{text}"
        f = ex.diagnosis_file
        if f is not None and self.rank == 0 and f.exists():
            f.write_text(ex.diagnosis + "\n", encoding="utf-8")

    def _copy_to_host(self, packed):
        """Start the one device-to-host copy of this step's verdict (pinned buffer + event on CUDA)."""
        import torch

        if not packed.is_cuda:
            return packed.to("cpu", non_blocking=True)
        if getattr(self, "_pinned", None) is None:
            self._pinned = [torch.empty(packed.shape, dtype=packed.dtype, pin_memory=True) for _ in range(2)]
            self._flip = 0
        buf = self._pinned[self._flip]
        self._flip ^= 1
        buf.copy_(packed, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        return _PendingCopy(buf, done)

    def flush(self) -> None:
        """Process the deferred verdict of the last step (on CUDA with ``defer_host_read``)."""
        if self._pending is not None:
            prev, self._pending = self._pending, None
            self._process(*prev)

    # ------------------------------------------------------------------ checkpoints and state
    def save(self) -> Any:
        """Checkpoint the whole training state (model, optimizer, ..., this guard's timeline)."""
        self.flush()
        if self.config.loss_rise is not None:  # the loss-rise rule's target must survive pruning
            self.executor.keep_target(self.policy.level.get("best_step"))
        self.state.step = self.step_count
        self.poll_save()  # a previous async save finished: log it before the next one starts
        t0 = time.perf_counter()
        if self.snapshot is not None:
            self.snapshot.take()  # the same state, kept in host memory for a fast rollback
        asynchronous = getattr(self.store, "asynchronous", False)  # a sharded store with its own gloo group
        if asynchronous:
            self.poll_save(wait=True)  # one save in flight (the store would wait for it anyway)
            out = self._inflight = self.store.async_save(self.step_count, self.state.state_dict())
        else:
            out = self.store.save(self.step_count, self.state.state_dict())
        self.log.timing({"step": self.step_count, "event": "checkpoint_save", "mode": "async" if asynchronous else "sync",
                         "seconds": round(time.perf_counter() - t0, 6), "snapshot": self.snapshot is not None})
        return out

    @property
    def pending_save(self):
        """The asynchronous save in flight (a :class:`lossguard.checkpoint.PendingSave`: ``done()``,
        ``wait()``, ``seconds``), or None when there is none or it was already logged as finished."""
        return self._inflight

    def poll_save(self, *, wait: bool = False) -> None:
        """Log the completion of the asynchronous save in flight once it is done (``wait``: block
        for it). Called at every step and save and at :meth:`close`; never blocks unless asked."""
        pending = self._inflight
        if pending is None or not (wait or pending.done()):
            return
        self._inflight = None
        rec = {"step": pending.step, "event": "checkpoint_saved", "mode": "async"}
        try:
            pending.wait()
            rec["seconds"] = round(pending.seconds, 6)
        except Exception as exc:  # noqa: BLE001 - logged here, raised by the store's next wait()
            rec["error"] = str(exc).splitlines()[0]
        self.log.timing(rec)

    def restore(self, step: int | None = None) -> int:
        """Resume from the store; returns the step.

        Args:
            step: the checkpoint to load. None = the ledger's ``resume_from`` if a previous process
                left one (a rollback booked but not finished: a framework restart, or a crash in
                the middle of an in-process rollback), else the newest valid.

        A booked rollback is finished exactly as the in-process one would have: the checkpoints
        newer than its target are removed (every rank calls this), the target is loaded, the
        timeline is reset as a rollback leaves it, and only then is ``resume_from`` cleared -- so
        a crash at any moment of a rollback, or of this resume, resumes on the new timeline.
        """
        pending = self.ledger.resume_from if step is None else None
        if pending is not None:
            step = pending
            self.executor.abandon_newer(pending)
        t0 = time.perf_counter()
        self.state.restore(self.store, step)  # a sharded state loads into its own template (DCP)
        self.log.timing({"step": self.state.step, "event": "checkpoint_load", "source": "disk",
                         "seconds": round(time.perf_counter() - t0, 6)})
        if pending is not None:
            self.executor.after_restore(pending)
            self.ledger.resume_from = None
            self.ledger.save()
        self.step_count = self.state.step
        self._reiter = True
        return self.step_count

    def state_dict(self) -> dict[str, Any]:
        """The timeline: detector windows, the policy's open episode, the data counter (JSON-safe).
        Goes into every checkpoint (TrainState extras) and is rolled back with it."""
        return {"format": GUARD_FORMAT, "judge": self.judge.state_dict(), "policy": self.policy.state_dict(),
                "data_count": self._data_count, "lr_ramp": self._lr_ramp.state_dict(),
                "withheld": self.withheld.state_dict(), "treatment": responders_state(self.treatment)}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (format 1, from before the ledger, is read too)."""
        if not isinstance(sd, dict) or sd.get("format") not in (1, GUARD_FORMAT):
            from ..errors import CheckpointError
            raise CheckpointError("not a StabilityGuard state", fix="load a checkpoint saved with the guard")
        if sd["format"] == 1:  # windows at the top level, budget inside the policy
            sd = {"judge": {"loss": sd["loss"], "grad_norm": sd.get("grad_norm")},
                  "policy": {"episode": sd["policy"]["episode"], "overflow_streak": sd["policy"]["overflow_streak"]},
                  "data_count": sd["data_count"]}
        self.judge.load_state_dict(sd["judge"])
        self.policy.load_state_dict(sd["policy"])
        self._data_count = int(sd["data_count"])
        self._lr_ramp.load_state_dict(sd.get("lr_ramp"))
        self.withheld.load_state_dict(sd.get("withheld"))
        load_responders_state(self.treatment, sd.get("treatment"))

    def adopt_ledger(self, ledger: RunLedger) -> None:
        """Use ``ledger`` from now on (a framework callback restoring its own saved ledger)."""
        ledger.path = self.ledger.path if ledger.path is None else ledger.path
        if ledger.halted:  # a checkpoint of a run that was halted: final, as at construction
            from .halted import halted_error
            raise halted_error(ledger)
        self.policy.ledger = ledger

    def close(self) -> None:
        """Process any deferred verdict, wait for an asynchronous save in flight, close the log."""
        self.flush()
        self.poll_save(wait=True)
        if self.store is not None:
            self.store.wait()
        self.log.close()


class _PendingCopy:
    """A device-to-host copy in flight: ``tolist()`` waits for its event, then reads the buffer."""

    def __init__(self, buf, event) -> None:
        self.buf, self.event = buf, event

    def tolist(self) -> list:
        self.event.synchronize()
        return self.buf.tolist()
