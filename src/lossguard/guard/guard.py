"""StabilityGuard: sees each step before the optimizer applies it, skips it, rolls back, or halts.

A plain loop::

    guard = StabilityGuard(model, opt, store=CheckpointStore("ckpt"), sampler=sampler,
                           scheduler=sched, log_path="run.jsonl")
    for step, batch in guard.batches(loader, steps=10_000):
        loss = model(batch)
        loss.backward()
        guard.step(loss)              # clip, judge, optimizer.step (or not), scheduler, zero_grad

Accounting (decided; ``docs/guard.md`` has the table):

- a **skipped step** consumes its batch and counts as a step: the step counter and the LR schedule
  advance (the schedule stays a function of the step number, as after an fp16 overflow skip);
  Adam's ``t``, the weights and both moments do not change; the batch is not retried.
- a **rollback** restores the checkpoint's step counter, model, optimizer (so Adam's ``t``),
  scheduler (so the LR), GradScaler, RNG, data position and the guard's detector windows; it keeps
  the guard's budgets (rollbacks made, data ranges skipped, LR cut). The data stream then skips
  ``[episode onset batch, last bad batch + 1 + skip_margin)`` when it reaches it: the batches between
  the checkpoint and the onset are trained on again (the restored weights never saw them).

Device work per step (no host sync in the hot path with a device gate): the global gradient norm,
two ring-buffer median/MAD updates, the finite checks and the verdict, packed into one 10-float
tensor that is copied to the host once -- immediately on CPU, one step late on CUDA
(``defer_host_read``), where a rollback therefore acts one step late (it restores a checkpoint, so
the extra step is discarded with the rest). On a CPU (``stats="auto"``) the same statistics run on
the host with the analyser's own ``OnlineOutlier``: there the host is the device, and a few Python
floats cost less than ~60 tiny tensor ops.
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..errors import require
from .config import GuardConfig
from .decision import StepRecord
from .actions import RecoveryActions, TrainingHalted
from .events import EventLog
from .policy import RecoveryPolicy

GUARD_FORMAT = 1


class StabilityGuard(RecoveryActions):
    """Guards a PyTorch training loop: skip a bad step, roll back + skip data, cut the LR, reset the
    loss scale, or halt with a diagnosis.

    Args:
        model: the module being trained (a DDP wrapper is fine; its ``.module`` is checkpointed).
        optimizer: any ``torch.optim`` optimizer; :class:`SkipStepAdamW` enables the sync-free gate.
        store: a :class:`lossguard.checkpoint.store.CheckpointStore`; needed for rollbacks. Under
            DDP give every rank its own store (or directory).
        sampler: the data position (e.g. :class:`ResumableSampler`); with it a rollback rewinds the
            data and a skip is O(1). Without it the stream is not rewound and skips discard batches.
        scheduler: LR scheduler, stepped once per step (skipped or not).
        scaler: ``torch.amp.GradScaler`` for fp16; the loop calls ``scaler.scale(loss).backward()``
            and passes the unscaled ``loss`` to :meth:`step`.
        config: thresholds and budgets.
        log_path: the run's JSONL log (decisions and per-step metrics; rank 0 only).
        diagnosis_path: where a halt writes its diagnosis (default: beside the log, or the store).
    """

    def __init__(self, model, optimizer, *, store=None, sampler=None, scheduler=None, scaler=None,
                 config: GuardConfig | None = None, log_path=None, diagnosis_path=None) -> None:
        torch = require("torch", "torch", "StabilityGuard")
        from ..checkpoint.state import TrainState
        from .device_stats import DeviceOutlier
        from .gate import supports_device_gate

        self.config = cfg = config or GuardConfig()
        self.model, self.optimizer, self.scheduler, self.scaler = model, optimizer, scheduler, scaler
        self.store, self.sampler = store, sampler
        module = getattr(model, "module", model)
        self._params = [p for p in model.parameters() if p.requires_grad]
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
        self._log_path = None if log_path is None else Path(log_path)
        self._diagnosis_path = diagnosis_path
        self.policy = RecoveryPolicy(cfg, has_scaler=scaler is not None)
        self._host_stats = cfg.stats == "host" or (cfg.stats == "auto" and device.type == "cpu")
        if self._host_stats:
            from ..detect.outlier import OnlineOutlier
            self._loss_det = OnlineOutlier(cfg.loss)
            self._gn_det = OnlineOutlier(cfg.grad_norm) if cfg.grad_norm is not None else None
        else:
            self._loss_det = DeviceOutlier(cfg.loss, device)
            self._gn_det = DeviceOutlier(cfg.grad_norm, device) if cfg.grad_norm is not None else None
        # Deferring the host read only makes sense when the statistics live on the device.
        self._defer = not self._host_stats and (
            cfg.defer_host_read if cfg.defer_host_read is not None else device.type == "cuda")
        self.state = TrainState(module, optimizer, scheduler=scheduler, scaler=scaler, data=sampler,
                                extras={"guard": self})
        self.step_count = 0
        """The step the next batch feeds (skipped steps count; a rollback sets it back)."""
        self.halted = False
        self.diagnosis: str | None = None
        self._data_count = 0      # batches drawn from the stream (used without a sampler)
        self._batch_index = 0     # data-stream index of the batch in flight
        self._rng = None          # torch RNG when the batch in flight was drawn (replay check)
        self._pending = None      # deferred (record tensor, meta) of the previous step
        self._reiter = False      # batches() must re-create its iterator (after a rollback)
        self.last_record: StepRecord | None = None
        self._external = False    # framework mode (before_optimizer_step): no rollback in process

    # ------------------------------------------------------------------ data
    @property
    def batch_index(self) -> int:
        """Data-stream index of the batch last yielded by :meth:`batches` (its global batch number)."""
        return self._batch_index

    def _next_index(self) -> int:
        return int(self.sampler.position) if self.sampler is not None else self._data_count

    def batches(self, loader: Iterable, *, steps: int | None = None) -> Iterator[tuple[int, Any]]:
        """Yield ``(step, batch)`` from ``loader``, skipping the data ranges a rollback chose.

        Args:
            loader: any iterable of batches (re-iterated at its end when ``steps`` is given, and
                after a rollback so the restored data position takes effect).
            steps: stop when the step counter reaches this; None = one pass over ``loader``.

        Raises:
            TrainingHalted: the guard halted the run (with ``halt_raises``; else the loop just ends).
        """
        cfg = self.config
        if self.store is not None and cfg.checkpoint_every \
                and self.store.newest_at_or_before(self.step_count) is None:
            self.save()  # a rollback target from the very start
        it = iter(loader)
        while steps is None or self.step_count < steps:
            if self.halted:
                break
            if self._reiter:
                it, self._reiter = iter(loader), False
            end = None if cfg.shadow else self.policy.skip_to(self._next_index())
            if end is not None:
                n = end - self._next_index()
                if self.sampler is not None:
                    self.sampler.skip_batches(n)
                    it = iter(loader)
                else:
                    for _ in range(n):
                        if next(it, StopIteration) is StopIteration:
                            it = iter(loader)
                    self._data_count += n
            batch = next(it, StopIteration)
            if batch is StopIteration:
                if steps is None:
                    break
                it = iter(loader)
                batch = next(it, StopIteration)
                if batch is StopIteration:
                    break
            self._batch_index = int(self.sampler.position) - 1 if self.sampler is not None else self._data_count
            self._data_count += 1
            if cfg.replay and not self._defer:
                from .replay import capture_torch_rng
                self._rng = capture_torch_rng()
            yield self.step_count, batch
        self.flush()
        if self.halted and cfg.halt_raises:
            raise TrainingHalted(self.diagnosis or "halted", path=self._diagnosis_file(),
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
        cfg, opt = self.config, self.optimizer
        with torch.no_grad():
            local = loss.detach().to(torch.float64).reshape(())
            glob = local.clone()
            if self._world > 1:
                torch.distributed.all_reduce(glob)  # one small all-reduce: the statistics use the global loss
                glob /= self._world
            if self.scaler is not None:
                self.scaler.unscale_(opt)
            from .gate import grad_norm
            gn = grad_norm(self._params, cfg.max_grad_norm).to(torch.float64)
            if self._host_stats:
                _, apply, packed = self._judge_on_host(glob, gn, local)
            else:
                _, apply, packed = self._judge_on_device(glob, gn, local)
            factor = self.policy.lr_factor(self.step_count)
            groups = opt.param_groups
            saved = [g["lr"] for g in groups]
            if factor != 1.0:
                for g in groups:
                    g["lr"] = g["lr"] * factor
            lr_used = float(groups[0]["lr"]) if groups else math.nan
            if self.gate == "device":
                (self.scaler.step(opt, gate=apply) if self.scaler is not None else opt.step(gate=apply))
            elif cfg.shadow or bool(apply):  # host gate: the one sync of this path
                (self.scaler.step(opt) if self.scaler is not None else opt.step())
            for g, lr in zip(groups, saved):
                g["lr"] = lr
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
                "rng": self._rng, "replay": None if self._defer else replay}
        self.step_count += 1
        self.state.step = self.step_count
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

    def before_optimizer_step(self, loss) -> bool:
        """Framework mode: judge this step when a framework (Lightning, ...) calls ``optimizer.step()``
        itself. Call after backward, before the optimizer step.

        A bad step's gradients are dropped (``zero_grad(set_to_none=True)``): torch's optimizers skip
        every parameter without a gradient, so weights, moments, Adam's ``t`` and weight decay stay
        exactly as they were and no NaN reaches them. The framework still steps its scheduler (the
        accounting of a skip is as in :meth:`step`). The framework owns the data loader, so the
        guard cannot rewind or skip data: where it would roll back it halts instead, naming the
        checkpoint to resume from and the batches to skip.

        Returns:
            True if the update may be applied (always True in shadow mode or once halted).
        """
        import torch

        if self.halted:
            return True
        self._external = True
        with torch.no_grad():
            local = loss.detach().to(torch.float64).reshape(())
            glob = local.clone()
            if self._world > 1:
                torch.distributed.all_reduce(glob)
                glob /= self._world
            from .gate import grad_norm
            gn = grad_norm(self._params).to(torch.float64)
            if self._host_stats:
                bad, _, packed = self._judge_on_host(glob, gn, local)
            else:
                bad_t, _, packed = self._judge_on_device(glob, gn, local)
                bad = bool(bad_t)  # framework mode needs the verdict now: one sync
        lr = float(self.optimizer.param_groups[0]["lr"]) if self.optimizer.param_groups else math.nan
        meta = {"step": self.step_count, "batch_index": self.step_count, "lr": lr,
                "loss_scale": float(self.scaler.get_scale()) if self.scaler is not None else math.nan,
                "rng": None, "replay": None}
        self.step_count += 1
        self.state.step = self.step_count
        self._process(packed, meta)
        if bad and not self.config.shadow:
            self.optimizer.zero_grad(set_to_none=True)
        return not bad or self.config.shadow

    def _judge_on_device(self, glob, gn, local):
        """Verdict as 0-d tensors on the device (no sync); returns (bad, apply, packed record)."""
        import torch

        gn_finite = torch.isfinite(gn)
        lv = self._loss_det.update(glob)
        if self._gn_det is not None:
            gv = self._gn_det.update(gn)
            gn_out, gn_z = gv.outlier, gv.z
        else:
            gn_out, gn_z = ~gn_finite, torch.full_like(gn, math.nan)
        # With a GradScaler, overflow steps are the scaler's business (it skips them itself).
        overflow = (~gn_finite) if self.scaler is not None else torch.zeros_like(gn_finite)
        bad = lv.outlier | (gn_out & ~overflow)
        apply = torch.ones_like(bad) if self.config.shadow else ~bad
        packed = torch.stack([glob, gn, lv.z, gn_z, lv.baseline, lv.outlier.double(), gn_out.double(),
                              overflow.double(), bad.double(), local])
        return bad, apply, packed

    def _judge_on_host(self, glob, gn, local):
        """The same verdict with the analyser's OnlineOutlier on Python floats (CPU runs)."""
        import torch

        lossv, gnv = float(glob), float(gn)
        lv = self._loss_det.update(lossv)
        gn_finite = math.isfinite(gnv)
        if self._gn_det is not None:
            gv = self._gn_det.update(gnv)
            gn_out, gn_z = gv.outlier, gv.z
        else:
            gn_out, gn_z = not gn_finite, math.nan
        overflow = self.scaler is not None and not gn_finite
        bad = lv.outlier or (gn_out and not overflow)
        ok = self.config.shadow or not bad
        apply = torch.tensor(ok) if self.gate == "device" else ok
        packed = [lossv, gnv, lv.z, gn_z, lv.baseline, float(lv.outlier), float(gn_out), float(overflow),
                  float(bad), float(local)]
        return bad, apply, packed

    def _copy_to_host(self, packed):
        """Start the one device-to-host copy of this step's record; returns what ``_process`` reads.

        On CUDA the copy goes into one of two pinned buffers (a pageable target would make
        ``non_blocking`` synchronous) and an event marks its end; the record is read one step later,
        after ``event.synchronize()``, by which time the copy has long finished. (Unverified here:
        no GPU on the development machine.)
        """
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
        """Process the deferred record of the last step (on CUDA with ``defer_host_read``)."""
        if self._pending is not None:
            prev, self._pending = self._pending, None
            self._process(*prev)

    # ------------------------------------------------------------------ checkpoints and state
    def save(self) -> Any:
        """Checkpoint the whole training state (model, optimizer, ..., this guard) at the current step."""
        self.flush()
        self.state.step = self.step_count
        return self.store.save(self.step_count, self.state.state_dict())

    def restore(self, step: int | None = None) -> int:
        """Resume from the store (newest valid checkpoint when ``step`` is None); returns the step."""
        self.state.load_state_dict(self.store.load(step))
        self.step_count = self.state.step
        self._reiter = True
        return self.step_count

    @property
    def events(self) -> list[dict[str, Any]]:
        """The decision records written by this process, in order."""
        return self.log.records

    def state_dict(self) -> dict[str, Any]:
        """Detector windows, policy budgets and episode, data counter (goes into TrainState extras)."""
        return {"format": GUARD_FORMAT, "loss": self._loss_det.state_dict(),
                "grad_norm": None if self._gn_det is None else self._gn_det.state_dict(),
                "policy": self.policy.state_dict(), "data_count": self._data_count}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        if not isinstance(sd, dict) or sd.get("format") != GUARD_FORMAT:
            from ..errors import CheckpointError
            raise CheckpointError("not a StabilityGuard state", fix="load a checkpoint saved with the guard")
        self._loss_det.load_state_dict(sd["loss"])
        if self._gn_det is not None and sd.get("grad_norm") is not None:
            self._gn_det.load_state_dict(sd["grad_norm"])
        self.policy.load_state_dict(sd["policy"])
        self._data_count = int(sd["data_count"])

    def close(self) -> None:
        """Process any deferred record and close the log."""
        self.flush()
        self.log.close()


class _PendingCopy:
    """A device-to-host copy in flight: ``tolist()`` waits for its event, then reads the buffer."""

    def __init__(self, buf, event) -> None:
        self.buf, self.event = buf, event

    def tolist(self) -> list:
        self.event.synchronize()
        return self.buf.tolist()
