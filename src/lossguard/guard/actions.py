"""The host side of the guard: turn a step record into decisions and carry them out.

Split from :mod:`.guard` (which owns the hot path) so each file holds one concept: this mixin
reads the step record, runs the replay check, asks the :class:`RecoveryPolicy` and executes skip,
rollback (restore + data skip), LR cut, loss-scale reset and halt, writing one JSONL event each.
It uses the guard's attributes (``config``, ``policy``, ``log``, ``store``, ``state``, ...).
"""
from __future__ import annotations

from pathlib import Path

from ..errors import LossguardError
from .decision import Action, Decision, StepRecord


class TrainingHalted(LossguardError):
    """The guard stopped the run: the rollback budget is spent (the message has the diagnosis)."""


class RecoveryActions:
    """Mixin of :class:`StabilityGuard`: record -> decisions -> actions (all on the host)."""

    def _process(self, packed, meta: dict) -> None:
        v = packed if isinstance(packed, list) else packed.tolist()
        rec = StepRecord(step=meta["step"], batch_index=meta["batch_index"], loss=v[0], grad_norm=v[1],
                         loss_z=v[2], grad_norm_z=v[3], loss_baseline=v[4], loss_outlier=bool(v[5]),
                         grad_norm_outlier=bool(v[6]), overflow=bool(v[7]), bad=bool(v[8]),
                         loss_scale=meta["loss_scale"], lr=meta["lr"])
        self.last_record = rec
        if self.config.log_metrics:
            m = {"loss": rec.loss, "grad_norm": rec.grad_norm, "lr": rec.lr}
            if self.scaler is not None:
                m["loss_scale"] = rec.loss_scale
            self.log.metrics(rec.step, m)
        transient = False
        # Replay only when the update was withheld: in shadow mode the weights already moved, so the
        # replayed forward would differ for that reason alone.
        if (rec.bad and meta["replay"] is not None and meta["rng"] is not None and self.config.replay
                and not self.config.shadow):
            transient = self._replay_check(rec, meta, local_loss=v[9])
        for d in self.policy.observe(rec, transient=transient):
            self._carry_out(d)
            if self.halted or self._reiter:
                break  # a rollback or halt makes the rest of this step's decisions moot

    def _replay_check(self, rec: StepRecord, meta: dict, *, local_loss: float) -> bool:
        import torch

        from .replay import replay_loss, reproduces
        again = replay_loss(meta["replay"], meta["rng"])
        ok = reproduces(local_loss, again, self.config.replay_rtol)
        if self._world > 1:  # every rank must take the same decision
            flag = torch.tensor([1.0 if ok else 0.0], dtype=torch.float64,
                                device=self._params[0].device if self._params else "cpu")
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MIN)
            ok = bool(flag.item())
        self.log.event(Decision(Action.REPLAY, rec.step, [
            "fault reproduces on replay (data or model)" if ok else
            "fault did not reproduce on replay: transient (hardware) fault"],
            {"loss": local_loss, "replayed_loss": again, "reproduced": ok, "transient": not ok}).record())
        return not ok

    def _emit(self, d: Decision, **extra) -> None:
        rec = d.record()
        rec.update(extra)
        if self.config.shadow:
            rec["shadow"] = True
        self.log.event(rec)

    def _carry_out(self, d: Decision) -> None:
        from ..techniques.loss_scale import reset_grad_scaler
        from .gate import optimizer_state_finite

        if d.action is Action.SKIP:
            self._emit(d)
        elif d.action is Action.ROLLBACK:
            self._rollback(d)
        elif d.action is Action.LOSS_SCALE_RESET:
            if self.config.shadow:
                self._emit(d)
            elif not optimizer_state_finite(self.optimizer):
                self._carry_out(self.policy.escalate(d.step, "optimizer state is not finite: a loss-scale "
                                                             "reset cannot help"))
            else:
                new = reset_grad_scaler(self.scaler, self.config.loss_scale_reset_to)
                self._emit(d, new_scale=new)
        elif d.action is Action.HALT:
            self._halt(d)
        else:
            self._emit(d)

    def _target(self, onset: int) -> int | None:
        if self.store is None:
            return None
        target = self.store.newest_at_or_before(onset - self.config.rollback_distance)
        if target is None:  # early in the run: the oldest checkpoint before the onset
            older = [s for s in self.store.steps() if s <= onset]
            target = older[0] if older else None
        return target

    def _rollback(self, d: Decision) -> None:
        target = self._target(d.numbers["onset"])
        if self._external and not self.config.shadow:  # framework mode: the framework owns the data
            rng = d.numbers.get("skip_batches")
            self._halt(Decision(Action.HALT, d.step, d.reasons + [
                "a rollback is needed, but the framework owns the data loader: resume from the checkpoint "
                f"below and skip batches {rng}"], d.numbers))
            return
        if self.config.shadow:
            self._emit(d, would_roll_back_to=target)
            for f in self.policy.rolled_back(d, d.step):
                self._emit(f)
            return
        if target is None:
            self._halt(Decision(Action.HALT, d.step, d.reasons + ["no checkpoint at or before the episode "
                                                                  f"onset (step {d.numbers['onset']})"], d.numbers))
            return
        self.store.protect(target)
        budget, data_count = self.policy.budget_state(), self._data_count
        self.state.load_state_dict(self.store.load(target))  # also restores this guard's windows
        self.policy.load_budget_state(budget)
        if self.sampler is None:
            self._data_count = data_count  # the stream was not rewound
        self.step_count = self.state.step
        follow = self.policy.rolled_back(d, target)
        self._emit(d, to_step=target)
        self._reiter, self._pending = True, None
        if self.scaler is not None and self.config.reset_loss_scale_on_rollback:
            from ..techniques.loss_scale import reset_grad_scaler
            from .gate import optimizer_state_finite
            if optimizer_state_finite(self.optimizer):
                new = reset_grad_scaler(self.scaler, self.config.loss_scale_reset_to)
                self._emit(Decision(Action.LOSS_SCALE_RESET, target, ["reset with the rollback"], {"new_scale": new}))
        for f in follow:
            self._emit(f)

    def _diagnosis_file(self) -> Path | None:
        if self._diagnosis_path is not None:
            return Path(self._diagnosis_path)
        if self._log_path is not None:
            return self._log_path.with_name(self._log_path.stem + ".halt.txt")
        if self.store is not None:
            return Path(self.store.directory) / "HALT.txt"
        return None

    def _halt(self, d: Decision) -> None:
        onset = d.numbers.get("onset", d.step)
        resume = self._target(onset)
        p = self.policy
        lines = [f"lossguard halted the run at step {d.step}.", "Why:"] + [f"  - {r}" for r in d.reasons] + [
            f"Episode onset: step {onset}; rollbacks done: {p.rollbacks}; steps skipped: {p.skips} "
            f"({p.transients} transient).",
            f"Data ranges skipped (batch indices, half-open): {p.skip_ranges or 'none'}.",
            (f"Resume from checkpoint step {resume}: {self.store.path_of(resume)}" if resume is not None
             else "No checkpoint before the episode is available."),
            "Before resuming: lower the LR, check the data around the episode's batches, or raise max_rollbacks."]
        self.diagnosis = "\n".join(lines)
        path = self._diagnosis_file()
        if self.config.shadow:  # report only: the event says what would have happened
            path = None
        if path is not None and self.rank == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.diagnosis + "\n", encoding="utf-8")
        self._emit(d, resume_from=resume, diagnosis=None if path is None else str(path))
        if not self.config.shadow:
            self.halted = True
