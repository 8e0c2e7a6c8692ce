"""Hugging Face ``Trainer`` callback: the guard inside ``trainer.train()``, with no logic of its own.

    trainer = Trainer(model, args, train_dataset=ds,
                      callbacks=[StabilityCallback(GuardConfig(), log_path="run.jsonl")])

The Trainer calls ``optimizer.step()`` itself and passes no loss to callbacks, so the callback
keeps each training forward's ``output.loss`` (a forward hook on the model; the mean over the
micro-batches of one optimizer step under gradient accumulation) and judges the step at
``on_pre_optimizer_step`` through the guard's framework mode
(:meth:`StabilityGuard.before_optimizer_step`): a bad step's gradients are dropped, so the optimizer
leaves every parameter and its state untouched. Where the guard would roll back it halts instead (the
Trainer owns the data loader) and sets ``control.should_training_stop``.

The Trainer clips gradients *before* ``on_pre_optimizer_step``, so the guard sees the clipped norm:
non-finite gradients are still caught, but a gradient-norm spike beyond ``max_grad_norm`` is not;
the loss test is unaffected. To watch the true norm, set ``TrainingArguments(max_grad_norm=0)``
(the guard does not clip in framework mode, so the run then trains unclipped).
"""
from __future__ import annotations

from ..errors import require
from ..guard.config import GuardConfig

transformers = require("transformers", "hf", "The Hugging Face integration")


class StabilityCallback(transformers.TrainerCallback):
    """Skip bad steps in a ``Trainer`` run and stop it with a diagnosis when skipping is not enough.

    Args:
        config: the guard's thresholds and budgets.
        log_path: the JSONL log the guard writes its decisions (and per-step metrics) to.
        store: optional :class:`CheckpointStore` whose checkpoints a halt may name.
    """

    def __init__(self, config: GuardConfig | None = None, *, log_path=None, store=None) -> None:
        self.config = config or GuardConfig()
        self.log_path, self.store = log_path, store
        self.guard = None
        self._losses: list = []
        self._hook = None

    def _keep_loss(self, module, inputs, output) -> None:
        import torch

        if not (module.training and torch.is_grad_enabled()):
            return  # evaluation forwards are not training steps
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if loss is not None:
            self._losses.append(loss.detach())

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        from ..guard.guard import StabilityGuard

        self.guard = StabilityGuard(model, optimizer, store=self.store, config=self.config, log_path=self.log_path)
        self.guard.step_count = state.global_step
        self._hook = model.register_forward_hook(self._keep_loss)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        import torch

        if not self._losses:
            return  # no loss seen (a model that returns tuples): nothing to judge
        loss, self._losses = torch.stack(self._losses).mean(), []
        self.guard.before_optimizer_step(loss)
        if self.guard.halted:
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self.guard is not None:
            self.guard.close()
