"""The Lightning callback applies the run ledger's LR cut (a relaunch after a rollback must not train at
the full LR again): scheduled LR x factor from the cut's start step on, unchanged before, never compounded."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from lossguard.integrations.lightning import StabilityCallback  # noqa: E402
from lossguard.recovery.ledger import LEDGER_FILE, LrCut, RunLedger  # noqa: E402

START, FACTOR, STEPS, GAMMA, LR = 4, 0.1, 9, 0.8, 1e-2


class Regression(pl.LightningModule):
    """Records the LR each optimizer step uses (Lightning calls the module's hook after the
    callbacks'), the scheduler's own value, and the groups' LR after the update."""

    def __init__(self, scheduler: bool):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.scheduler = scheduler
        self.used, self.scheduled, self.after = [], [], []

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def on_before_optimizer_step(self, optimizer):
        self.used.append(optimizer.param_groups[0]["lr"])

    def on_train_start(self):
        # Registered after the guard's post-hook (built at fit start): sees the LRs it put back.
        self.trainer.optimizers[0].register_step_post_hook(
            lambda opt, *_: self.after.append(opt.param_groups[0]["lr"]))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=LR)
        if not self.scheduler:
            return opt
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=GAMMA)  # chainable: lr <- lr * gamma
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


@pytest.mark.parametrize("scheduler", [True, False], ids=["exponential-lr", "constant-lr"])
def test_relaunched_fit_applies_the_ledgers_lr_cut_without_compounding(tmp_path, caplog, scheduler):
    torch.set_num_threads(1)
    ckpt_dir = tmp_path / "ckpt"
    ckpt_dir.mkdir()
    # What a relaunch finds: a cut booked before the restart, in the ledger beside the checkpoints.
    ledger = RunLedger.open(ckpt_dir / LEDGER_FILE)
    ledger.set_lr_cut(LrCut(start_step=START, until_step=None, factor=FACTOR, cause="recurrence"))
    ledger.save()

    torch.manual_seed(0)
    X = torch.randn(64, 4)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, X.sum(-1, keepdim=True)), batch_size=4)
    module = Regression(scheduler)
    cb = StabilityCallback(log_path=tmp_path / "run.jsonl")
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=str(ckpt_dir), filename="{step}", every_n_train_steps=1000)
    trainer = pl.Trainer(max_steps=STEPS, callbacks=[cb, ckpt], logger=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", devices=1)
    trainer.fit(module, loader)

    g = GAMMA if scheduler else 1.0
    scheduled = [LR * g ** t for t in range(STEPS)]
    assert len(module.used) == STEPS and len(module.after) == STEPS
    for t in range(STEPS):
        want = scheduled[t] * (FACTOR if t >= START else 1.0)
        assert module.used[t] == pytest.approx(want, rel=1e-9), t
        assert module.after[t] == pytest.approx(scheduled[t], rel=1e-9), t  # put back before the scheduler
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(LR * g ** STEPS, rel=1e-9)
    announced = [r for r in caplog.records
                 if r.name == "lossguard.integrations._lr_cut" and "LR cut is in force" in r.getMessage()]
    assert len(announced) == 1 and f"at step {START}" in announced[0].getMessage()  # once, when it starts
    assert cb.guard.ledger.lr_factor(STEPS) == FACTOR  # the booking itself is unchanged
