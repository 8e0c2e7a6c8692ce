"""Lightning callback: the guard inside ``Trainer.fit``, with no logic of its own.

    trainer = Trainer(callbacks=[StabilityCallback(GuardConfig(), log_path="run.jsonl")])

Lightning calls ``optimizer.step()`` itself, so the callback uses the guard's framework mode
(:meth:`StabilityGuard.before_optimizer_step`): it keeps the loss at ``on_before_backward``, judges
the step at ``on_before_optimizer_step`` (after backward and fp16 unscaling, before clipping), and a
bad step's gradients are dropped so the optimizer leaves every parameter and its state untouched.
Where the guard would roll back it halts instead (Lightning owns the data loader) and the callback
asks the trainer to stop. The guard's timeline (detector windows, open episode) and its run ledger
(budgets, skipped ranges, LR cuts) are saved in Lightning's checkpoints through the callback's
``state_dict``, so a resumed run keeps both.
"""
from __future__ import annotations

from typing import Any

from ..errors import require
from ..guard.config import GuardConfig
from ._state import guard_state, restore_guard

pl = require("lightning.pytorch", "lightning", "The Lightning integration")


class StabilityCallback(pl.Callback):
    """Skip bad steps in a Lightning run and stop it with a diagnosis when skipping is not enough.

    Args:
        config: the guard's thresholds and budgets.
        log_path: the JSONL log the guard writes its decisions (and per-step metrics) to.
        store: optional :class:`CheckpointStore` whose checkpoints a halt may name.
    """

    def __init__(self, config: GuardConfig | None = None, *, log_path=None, store=None) -> None:
        self.config = config or GuardConfig()
        self.log_path, self.store = log_path, store
        self.guard = None
        self._loss = None
        self._pending_state: dict[str, Any] | None = None

    def on_fit_start(self, trainer, pl_module) -> None:
        from ..guard.guard import StabilityGuard

        scaler = getattr(trainer.precision_plugin, "scaler", None)
        self.guard = StabilityGuard(pl_module, trainer.optimizers[0], store=self.store, scaler=scaler,
                                    config=self.config, log_path=self.log_path)
        if self._pending_state is not None:
            restore_guard(self.guard, self._pending_state)
            self._pending_state = None
        self.guard.step_count = trainer.global_step

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self._loss = loss.detach()

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.guard.before_optimizer_step(self._loss)
        if self.guard.halted:
            trainer.should_stop = True

    def on_fit_end(self, trainer, pl_module) -> None:
        if self.guard is not None:
            self.guard.close()

    def state_dict(self) -> dict[str, Any]:
        """The guard's timeline and ledger (Lightning saves it in its checkpoints)."""
        return guard_state(self.guard)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Keep the saved state until the guard is built at fit start."""
        if state_dict:
            self._pending_state = state_dict  # the guard is built at fit start
