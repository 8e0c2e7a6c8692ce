"""Hugging Face ``Trainer`` callback: the guard inside ``trainer.train()``, with no logic of its own.

    trainer = Trainer(model, args, train_dataset=ds,
                      callbacks=[StabilityCallback(GuardConfig(), log_path="run.jsonl")])

The Trainer calls ``optimizer.step()`` itself and passes no loss to callbacks, so the callback
keeps each training forward's ``output.loss`` (a forward hook on the model; the mean over the
micro-batches of one optimizer step under gradient accumulation) and judges the step at
``on_pre_optimizer_step`` through the guard's framework mode
(:meth:`StabilityGuard.before_optimizer_step`): a bad step's gradients are dropped, so the optimizer
leaves every parameter and its state untouched.

Rollback through a restart (the Trainer owns the data loader, so it cannot happen in the process):
the guard picks the newest ``checkpoint-<step>`` in ``output_dir`` at least ``rollback_distance``
steps before the episode, books it with the batches to skip in the run ledger
(``<output_dir>/ledger.json``), stops the Trainer and, at train end, exits the process with
``ExitCode.ROLLBACK`` (75). Relaunched (``torchrun --max-restarts``, or any scheduler), the same
script resumes with ``trainer.train(resume_from_checkpoint=resume_checkpoint(output_dir))`` and the
callback withholds the updates of the booked batches (the batch index is the optimizer step). With
no checkpoint old enough it halts loudly: the diagnosis (which test fired, the checkpoint, the
loader positions to skip) is printed and the process exits with ``ExitCode.HALT`` (77; the callback
owns the exit under the restart protocol). The halt is final: a relaunch finds ``halted`` in the
ledger and exits 77 again at train begin, printing why, until the halt is cleared
(``RunLedger.clear_halt``; :mod:`lossguard.guard.halted`). ``restart_on_rollback=False`` keeps the
old behaviour (halt with a diagnosis; ``train()`` raises ``TrainingHalted``).

State: the callback is an HF ``ExportableState``, so the Trainer writes the guard's timeline
(detector windows, open episode) and run ledger into ``trainer_state.json`` of every checkpoint
(``stateful_callbacks``) and a run resumed with ``resume_from_checkpoint`` gets them back: read from
the resumed ``TrainerState`` at train begin, so it works whether or not
``TrainingArguments.restore_callback_states_from_checkpoint`` is set (when it is, HF rebuilds the
callback from its ``args``, which are therefore JSON-safe: the config as a dict, the log path and
the store's directory as strings).

The Trainer clips gradients *before* ``on_pre_optimizer_step``, so the guard sees the clipped norm:
non-finite gradients are still caught, but a gradient-norm spike beyond ``max_grad_norm`` is not;
the loss test is unaffected. To watch the true norm, set ``TrainingArguments(max_grad_norm=0)``.

LR cuts: the LR cut the run ledger books (after a recurrence or a loss-rising rollback, e.g. x0.1
for the rest of the run) is applied to every optimizer step from its start step on, on top of the
Trainer's scheduled LR: the param groups are scaled at ``on_pre_optimizer_step`` and put back at
``on_optimizer_step``, before the scheduler steps (:mod:`._lr_cut`). A relaunched run reads the
cut from the ledger, so it does not train at the full LR again.
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

transformers = require("transformers", "hf", "The Hugging Face integration")
# transformers is optional: its base classes are known at run time only
_TrainerCallback: Any = transformers.TrainerCallback
_ExportableState: Any = transformers.trainer_callback.ExportableState


class StabilityCallback(_TrainerCallback, _ExportableState):
    """Skip bad steps in a ``Trainer`` run and stop it with a diagnosis when skipping is not enough.

    Args:
        config: the guard's thresholds and budgets (a :class:`GuardConfig`, or its dict form).
        log_path: the JSONL log the guard writes its decisions (and per-step metrics) to.
        store: optional :class:`CheckpointStore` (or its directory) whose checkpoints a halt may
            name; its directory also holds the run ledger. None: the Trainer's own checkpoints
            in ``output_dir`` (with ``restart_on_rollback``).
        restart_on_rollback: carry out a rollback through a process restart (exit code 75);
            False: halt with a diagnosis instead.
        attribution: a :class:`lossguard.guard.sample_namer.SampleAttribution`: name the samples
            of each withheld step from the keyword inputs of the step's training forwards (every
            micro-batch under gradient accumulation)
            (``per_sample_loss(model, inputs)``; :func:`lossguard.guard.row_losses.causal_lm_row_loss`
            for causal LMs; ``ids_of(inputs)`` for the sample ids). The run's skip list is attached
            to a :class:`ResumableSampler` the train loader uses (a ``Trainer`` whose
            ``_get_train_sampler`` returns one). Not saved in ``trainer_state.json``.
        precursors: measure the precursor statistics (largest attention logit per layer of every
            attention module the guard can read -- HF ``GPT2Attention``, ``nn.MultiheadAttention``,
            lossguard's own, any marked with ``mark_attention`` --, output-logit statistics of an
            ``lm_head``, the update-to-weight ratio, Adam's second-moment ratio) and log them, as
            the plain guard's ``precursors=True`` does. Each step's values are packed on the device
            after its optimizer step and read with the next step's verdict (no extra transfer).
        treatment: opt-in responders to the precursors (implies ``precursors``), as the plain
            guard's ``treatment``: e.g. :class:`~lossguard.guard.treatment.PrecursorTreatment`
            (QK-clip, then an LR cut, applied through the run ledger like every LR cut of the
            guard). They act one step later than in the plain loop. Their budgets are saved with
            the guard's timeline; the object itself is not saved in ``trainer_state.json``.
    """

    def __init__(self, config: GuardConfig | dict | None = None, *, log_path=None, store=None,
                 restart_on_rollback: bool = True, attribution=None, precursors: bool = False,
                 treatment=None) -> None:
        if isinstance(config, dict):
            from ..guard.config_file import config_from_dict
            config = config_from_dict(config)
        self.config = config or GuardConfig()
        if isinstance(store, str):
            from ..checkpoint.store import CheckpointStore
            store = CheckpointStore(store)
        self.log_path, self.store = log_path, store
        self.restart_on_rollback = bool(restart_on_rollback)
        self.attribution = attribution
        self.precursors, self.treatment = bool(precursors), treatment
        self._batch_hook = None
        self.guard: StabilityGuard | None = None
        self._owns_exit = False  # the restart protocol is in force: a halt exits with ExitCode.HALT
        self.restored_state: dict[str, Any] | None = None
        """Guard state from a resumed checkpoint, loaded into the guard at train begin."""
        self._losses: list = []
        self._hook = None
        self.positions = LoaderPositions()
        """Loader positions of the judged bad steps (named by a loud halt)."""
        self._lr_cut = LrCutApplier()

    def state(self) -> dict[str, Any]:
        """HF ``ExportableState``: JSON-safe constructor args and the guard's timeline + ledger."""
        from ..guard.config_file import config_to_dict
        return {"args": {"config": config_to_dict(self.config),
                         "log_path": None if self.log_path is None else str(self.log_path),
                         "store": None if self.store is None else str(self.store.directory),
                         "restart_on_rollback": self.restart_on_rollback, "precursors": self.precursors},
                "attributes": {"restored_state": guard_state(self.guard)}}

    def _keep_loss(self, module, inputs, output) -> None:
        import torch

        if not (module.training and torch.is_grad_enabled()):
            return  # evaluation forwards are not training steps
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if loss is not None:
            self._losses.append(loss.detach())

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        from ..guard.guard import StabilityGuard

        store = self.store
        if store is None and self.restart_on_rollback:
            from ._checkpoints import FrameworkCheckpoints
            store = FrameworkCheckpoints(args.output_dir, "hf")
        self._owns_exit = self.restart_on_rollback and store is not None

        def make():
            guard = StabilityGuard(model, optimizer, store=store, config=self.config, log_path=self.log_path,
                                   attribution=self.attribution, precursors=self.precursors or None,
                                   treatment=self.treatment)
            restore_guard(guard, self.restored_state or _saved_state(state))
            return guard
        self.guard = build_guard(make, exit_code=self._owns_exit)
        self.restored_state = None
        self.guard.step_count = state.global_step
        if state.max_steps and state.max_steps > 0:
            self.guard.policy.run_steps = int(state.max_steps)  # bounds the skip margin
        resume_ledger(self.guard, state.global_step)
        self._hook = model.register_forward_hook(self._keep_loss)
        if self.guard.namer is not None:
            from ._samples import attach_skiplist
            attach_skiplist(self.guard.namer, kwargs.get("train_dataloader"))
            self._batch_hook = model.register_forward_pre_hook(self._keep_batch, with_kwargs=True)

    def _keep_batch(self, module, args, kwargs) -> None:
        import torch

        guard = self.guard  # built at train begin, before the first forward pass
        if module.training and torch.is_grad_enabled() and guard is not None:
            guard.hold_batch(dict(kwargs))  # the Trainer calls model(**inputs)

    @property
    def _live(self) -> StabilityGuard:
        """The guard :meth:`on_train_begin` built (the step hooks all run after it)."""
        if self.guard is None:
            raise RuntimeError("StabilityCallback: a step hook ran before on_train_begin() built the guard")
        return self.guard

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        import torch

        # The ledger's LR cut on top of the scheduled LR for this step; undone at on_optimizer_step.
        self._lr_cut.apply(self._live, self._live.step_count)
        if not self._losses:
            return  # no loss seen (a model that returns tuples): nothing to judge
        loss, self._losses = torch.stack(self._losses).mean(), []
        step = self._live.step_count
        applied = self._live.before_optimizer_step(loss)
        # the precursor treatments respond inside it and may book an LR cut from this step on
        self._lr_cut.apply(self._live, step)
        if not applied or self._live.halted:
            loader = kwargs.get("train_dataloader")
            try:
                if loader is not None:
                    self.positions.batches_per_epoch = len(loader)
            except TypeError:  # an iterable loader without a length
                pass
            self.positions.accumulation = max(1, int(args.gradient_accumulation_steps))
            pos = self.positions.of(step)
            if pos is not None:
                self.positions.note(step, *pos)
        if self._live.halted:
            control.should_training_stop = True

    def on_optimizer_step(self, args, state, control, **kwargs):
        # Right after optimizer.step(), before the Trainer steps its scheduler (called even when
        # an fp16 overflow made the optimizer skip the step), so the cut never compounds.
        self._lr_cut.restore()
        if self.guard is not None:
            self.guard.after_optimizer_step()  # the step's precursors, packed for the next read

    def on_train_end(self, args, state, control, **kwargs):
        self._lr_cut.restore()
        for hook in (self._hook, self._batch_hook):
            if hook is not None:
                hook.remove()
        self._hook = self._batch_hook = None
        if self.guard is not None:
            self.guard.close()
        exit_for_restart(self.guard, self.restart_on_rollback)
        halt_loudly(self.guard, self.positions, raises=self.config.halt_raises, exit_code=self._owns_exit)


def _saved_state(trainer_state) -> dict[str, Any] | None:
    """The guard state this callback saved into a resumed ``TrainerState`` (None on a fresh run)."""
    saved = (getattr(trainer_state, "stateful_callbacks", None) or {}).get(StabilityCallback.__name__)
    if isinstance(saved, list):
        saved = saved[0] if saved else None
    if not isinstance(saved, dict):
        return None
    return saved.get("attributes", {}).get("restored_state") or None


def resume_checkpoint(output_dir) -> str | None:
    """Where a (re)launched run resumes: the checkpoint the run ledger in ``output_dir`` names after a
    rollback booked before a restart, else the newest checkpoint there, else None (fresh start).
    Pass it to ``trainer.train(resume_from_checkpoint=...)``."""
    return _resume_checkpoint(output_dir, "hf")
