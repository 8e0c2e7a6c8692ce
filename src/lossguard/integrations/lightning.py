"""Lightning callback: the guard inside ``Trainer.fit``, with no logic of its own.

    trainer = Trainer(callbacks=[StabilityCallback(GuardConfig(), log_path="run.jsonl")])

Lightning calls ``optimizer.step()`` itself, so the callback uses the guard's framework mode
(:meth:`StabilityGuard.before_optimizer_step`): it keeps the loss at ``on_before_backward``, judges
the step at ``on_before_optimizer_step`` (after backward and fp16 unscaling, before clipping), and a
bad step's gradients are dropped so the optimizer leaves every parameter and its state untouched.
Where the guard would roll back, the rollback goes through a restart (Lightning owns the data
loader): the guard picks the newest ``ModelCheckpoint`` file (``...step=<N>...ckpt``) at least
``rollback_distance`` steps before the episode, books it with the batches to skip in the run ledger
(``<dirpath>/ledger.json``), stops the trainer and at fit end exits the process with
``ExitCode.ROLLBACK`` (75); relaunched, the same script calls
``trainer.fit(..., ckpt_path=resume_checkpoint(dirpath))`` and the callback withholds the updates
of the booked batches (the batch index is the optimizer step). With no checkpoint old enough, or
``restart_on_rollback=False``, it halts loudly: the diagnosis (which test fired, the checkpoint,
the loader positions to skip) is printed and ``fit()`` raises ``TrainingHalted`` -- or, under the
restart protocol (``restart_on_rollback`` and a checkpoint directory), the process exits with
``ExitCode.HALT`` (77). The halt is final: a relaunch on the same directory finds ``halted`` in the
ledger and refuses to train (``RunLedger.clear_halt`` overrides; :mod:`lossguard.guard.halted`).
The guard's timeline (detector windows, open episode) and its run ledger
(budgets, skipped ranges, LR cuts) are saved in Lightning's checkpoints through the callback's
``state_dict``, so a resumed run keeps both.

LR cuts: the LR cut the run ledger books (after a recurrence or a loss-rising rollback, e.g. x0.1
for the rest of the run) is applied to every optimizer step from its start step on, on top of the
scheduled LR: the param groups are scaled at ``on_before_optimizer_step`` and put back by a torch
step post-hook right after the update, before Lightning steps its schedulers (:mod:`._lr_cut`). A
relaunched run reads the cut from the ledger, so it does not train at the full LR again.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import require
from ..guard.config import GuardConfig
from ._checkpoints import resume_checkpoint as _resume_checkpoint
from ._halt import LoaderPositions, build_guard, halt_loudly
from ._lr_cut import LrCutApplier
from ._state import exit_for_restart, guard_state, restore_guard, resume_ledger

if TYPE_CHECKING:
    from ..guard.guard import StabilityGuard

pl = require("lightning.pytorch", "lightning", "The Lightning integration")
_Callback: Any = pl.Callback  # lightning is optional: its base class is known at run time only


class StabilityCallback(_Callback):
    """Skip bad steps in a Lightning run and stop it with a diagnosis when skipping is not enough.

    Args:
        config: the guard's thresholds and budgets.
        log_path: the JSONL log the guard writes its decisions (and per-step metrics) to.
        store: optional :class:`CheckpointStore` whose checkpoints a halt may name. None: the
            trainer's ``ModelCheckpoint`` files (with ``restart_on_rollback``).
        restart_on_rollback: carry out a rollback through a process restart (exit code 75).
        attribution: a :class:`lossguard.guard.sample_namer.SampleAttribution`: name the samples
            of each withheld step (give it ``ids_of``, e.g. ``lambda b: b[0].tolist()`` for a batch
            that carries its ids: Lightning prefetches, so the sampler's position is one batch
            ahead). The run's skip list is attached to a :class:`ResumableSampler` found as the
            train loader's ``batch_sampler`` (unless it has its own). With gradient accumulation
            every micro-batch of the step is replayed (the bisection starts from one gradient norm
            per micro-batch).
        precursors: measure the precursor statistics (largest attention logit per layer of every
            attention module the guard can read -- ``nn.MultiheadAttention``, HF ``GPT2Attention``,
            lossguard's own, any marked with ``mark_attention`` --, output-logit statistics of an
            ``lm_head`` / ``output`` projection, the update-to-weight ratio, Adam's second-moment
            ratio) and log them, as the plain guard's ``precursors=True`` does. Each step's values
            are packed on the device after its optimizer step and read with the next step's verdict.
        treatment: opt-in responders to the precursors (implies ``precursors``), as the plain
            guard's ``treatment`` (e.g. :class:`~lossguard.guard.treatment.PrecursorTreatment`);
            they act one step later than in the plain loop; their budgets travel in the callback's
            ``state_dict``.
    """

    def __init__(self, config: GuardConfig | None = None, *, log_path=None, store=None,
                 restart_on_rollback: bool = True, attribution=None, precursors: bool = False,
                 treatment=None) -> None:
        self.config = config or GuardConfig()
        self.log_path, self.store = log_path, store
        self.restart_on_rollback = bool(restart_on_rollback)
        self.attribution = attribution
        self.precursors, self.treatment = bool(precursors), treatment
        self.guard: StabilityGuard | None = None
        self._owns_exit = False  # the restart protocol is in force: a halt exits with ExitCode.HALT
        self._loss = None
        self._pending_state: dict[str, Any] | None = None
        self.positions = LoaderPositions()
        """Loader positions of the judged bad steps (named by a loud halt)."""
        self._lr_cut = LrCutApplier()
        self._lr_hook = None

    def on_fit_start(self, trainer, pl_module) -> None:
        from ..guard.guard import StabilityGuard

        scaler = getattr(trainer.precision_plugin, "scaler", None)
        store = self.store
        ckpt = getattr(trainer, "checkpoint_callback", None)
        dirpath = getattr(ckpt, "dirpath", None)
        if store is None and self.restart_on_rollback and dirpath:
            from ._checkpoints import FrameworkCheckpoints
            store = FrameworkCheckpoints(dirpath, "lightning")
        self._owns_exit = self.restart_on_rollback and store is not None

        def make():
            guard = StabilityGuard(pl_module, trainer.optimizers[0], store=store, scaler=scaler,
                                   config=self.config, log_path=self.log_path, attribution=self.attribution,
                                   precursors=self.precursors or None, treatment=self.treatment)
            if self._pending_state is not None:
                restore_guard(guard, self._pending_state)
            return guard
        self.guard = build_guard(make, exit_code=self._owns_exit)
        self._pending_state = None
        # Lightning steps its schedulers before any callback hook that follows the optimizer step,
        # so the LR cut is undone by a torch step post-hook: right after the update, before them
        # (the same hook packs the step's precursors for the next read).
        self._lr_hook = trainer.optimizers[0].register_step_post_hook(self._after_optimizer_step)

    def _after_optimizer_step(self, *_args) -> None:
        self._lr_cut.restore()
        if self.guard is not None:
            self.guard.after_optimizer_step()

    @property
    def _live(self) -> StabilityGuard:
        """The guard :meth:`on_fit_start` built (the training hooks all run after it)."""
        if self.guard is None:
            raise RuntimeError("StabilityCallback: a training hook ran before on_fit_start() built the guard")
        return self.guard

    def on_train_start(self, trainer, pl_module) -> None:
        # The loops' progress (global_step) is restored from ckpt_path after on_fit_start.
        self._live.step_count = trainer.global_step
        resume_ledger(self._live, trainer.global_step)
        total = trainer.estimated_stepping_batches  # inf for an unbounded run
        if total == total and total != float("inf") and total > 0:
            self._live.policy.run_steps = int(total)  # bounds the skip margin

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._live.namer is not None:
            from ._samples import attach_skiplist
            attach_skiplist(self._live.namer, getattr(trainer, "train_dataloader", None))
            self._live.hold_batch(batch)

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self._loss = loss.detach()

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        step = self._live.step_count
        # The ledger's LR cut on top of the scheduled LR for this step (undone by the post-hook).
        self._lr_cut.apply(self._live, step)
        applied = self._live.before_optimizer_step(self._loss)
        # the precursor treatments respond inside it and may book an LR cut from this step on
        self._lr_cut.apply(self._live, step)
        if not applied or self._live.halted:
            # The update is dropped: undo the cut now, since an fp16 overflow also makes the
            # GradScaler skip optimizer.step(), and then the post-hook would never run.
            self._lr_cut.restore()
            acc = max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1))
            batch = int(getattr(trainer.fit_loop.epoch_loop, "batch_idx", step)) - (acc - 1)
            self.positions.note(step, trainer.current_epoch, max(batch, 0))
        if self._live.halted:
            trainer.should_stop = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # Only still pending if the optimizer skipped its step without the guard dropping it (an
        # fp16 overflow in shadow mode): put the LRs back before anything saves them.
        self._lr_cut.restore()

    def on_fit_end(self, trainer, pl_module) -> None:
        self._lr_cut.restore()
        if self._lr_hook is not None:
            self._lr_hook.remove()
            self._lr_hook = None
        if self.guard is not None:
            self.guard.close()
        exit_for_restart(self.guard, self.restart_on_rollback)
        nb = getattr(trainer, "num_training_batches", None)
        self.positions.batches_per_epoch = int(nb) if isinstance(nb, int) or (nb and nb != float("inf")) else None
        self.positions.accumulation = max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1))
        halt_loudly(self.guard, self.positions, raises=self.config.halt_raises, exit_code=self._owns_exit)

    def state_dict(self) -> dict[str, Any]:
        """The guard's timeline and ledger (Lightning saves it in its checkpoints)."""
        return guard_state(self.guard)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep the saved state until the guard is built at fit start."""
        if state_dict:
            self._pending_state = state_dict  # the guard is built at fit start


def resume_checkpoint(dirpath) -> str | None:
    """Where a (re)launched run resumes: the checkpoint the run ledger in ``dirpath`` names after a
    rollback booked before a restart, else the newest checkpoint there, else None (fresh start).
    Pass it to ``trainer.fit(..., ckpt_path=...)``."""
    return _resume_checkpoint(dirpath, "lightning")
