"""The Lightning callback: a NaN gradient inside ``Trainer.fit`` is skipped exactly; a persistent
fault stops the trainer with a diagnosis."""
from __future__ import annotations

import copy
import logging

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")
torch.set_num_threads(1)
pytestmark = pytest.mark.slow  # Lightning import + two Trainer.fit runs: ~1.5 min on the loaded 2-core machine

from lossguard.detect.outlier import OutlierConfig  # noqa: E402
from lossguard.guard import GuardConfig  # noqa: E402
from lossguard.integrations.lightning import StabilityCallback  # noqa: E402


class Regression(pl.LightningModule):
    def __init__(self, nan_steps=(), snapshot_at=None):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        self.nan_steps, self.snapshot_at, self.snaps = set(nan_steps), snapshot_at, {}

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def on_after_backward(self):
        if self.global_step in self.nan_steps:
            self.net[0].weight.grad.view(-1)[0] = float("nan")

    def on_train_batch_start(self, batch, batch_idx):
        if self.global_step in (self.snapshot_at, (self.snapshot_at or -9) + 1):
            opt = self.trainer.optimizers[0]
            self.snaps[self.global_step] = ([p.detach().clone() for p in self.parameters()],
                                            copy.deepcopy(opt.state_dict()["state"]))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def _fit(tmp_path, module, steps, **cfg):
    torch.manual_seed(0)
    X = torch.randn(1024, 8)
    Y = X @ torch.randn(8, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=16)
    det = OutlierConfig(min_points=20)
    cb = StabilityCallback(GuardConfig(loss=det, grad_norm=det, **cfg), log_path=tmp_path / "run.jsonl")
    trainer = pl.Trainer(max_steps=steps, callbacks=[cb], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1)
    trainer.fit(module, loader)
    return cb, trainer


def test_nan_gradient_is_skipped_inside_trainer_fit(tmp_path):
    module = Regression(nan_steps={30}, snapshot_at=30)
    cb, trainer = _fit(tmp_path, module, 50)
    assert [e["step"] for e in cb.guard.events if e["event"] == "skip"] == [30]
    (p30, s30), (p31, s31) = module.snaps[30], module.snaps[31]
    assert all(torch.equal(a, b) for a, b in zip(p30, p31, strict=True))  # weights bitwise unchanged
    for k in s30:
        for name in s30[k]:
            assert torch.equal(s30[k][name], s31[k][name])  # moments and Adam's t too
    assert trainer.global_step == 50 and all(torch.isfinite(p).all() for p in module.parameters())


def test_persistent_fault_stops_the_trainer_loudly_with_a_diagnosis(tmp_path, caplog):
    """A halt is loud (issue 10): ``fit()`` raises, and the printed diagnosis names the test that
    fired and the loader positions (epoch, batch) to skip, not just step numbers."""
    from lossguard.guard import TrainingHalted

    module = Regression(nan_steps=set(range(30, 200)))
    with pytest.raises(TrainingHalted):
        _fit(tmp_path, module, 200, rollback_after=3)
    err = _halt_messages(caplog)
    assert "lossguard halted the run at step 32" in err and "framework owns the data loader" in err
    assert "non-finite loss or gradient x3" in err
    # 1024 samples / batch 16 = 64 loader batches per epoch: step 30 is epoch 0, batch 30.
    assert "episode onset: step 30 = epoch 0, batch 30" in err
    assert (tmp_path / "run.halt.txt").exists()


def _halt_messages(caplog) -> str:
    """What the halt told the user since the last call: the errors its module logged (on stderr by
    default, through logging's last-resort handler or the CLI's)."""
    text = "\n".join(r.getMessage() for r in caplog.records
                     if r.name == "lossguard.integrations._halt" and r.levelno == logging.ERROR)
    caplog.clear()
    return text
