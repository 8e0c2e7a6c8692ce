"""Lightning ``metrics.csv`` reader, on files written by a real ``Trainer.fit`` with ``CSVLogger``.

Two real launches on CPU: version_0 trains 2 epochs of 8 steps (steps 0..15, validation at 7 and
15, a checkpoint after every epoch); version_1 resumes from the epoch-0 checkpoint (step 8) and
trains to epoch 3 (steps 8..23). Reading ``lightning_logs/`` must give two segments, the second a
rollback that supersedes version_0's steps 8..15.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from lossguard.errors import LogFormatError
from lossguard.io import detect_format, lightning, read_log
from lossguard.metrics import EPOCH, LOSS, VAL_LOSS

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    import warnings

    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("lightning")

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def training_step(self, batch, _):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.lin(x), y)
            self.log("train_loss", loss, on_step=True, on_epoch=False)
            return loss

        def validation_step(self, batch, _):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.lin(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))

    def loader():
        return torch.utils.data.DataLoader(data, batch_size=8)

    def trainer(epochs: int) -> pl.Trainer:
        return pl.Trainer(max_epochs=epochs, logger=CSVLogger(str(root)), log_every_n_steps=1, accelerator="cpu",
                          devices=1, enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(root),
                          callbacks=[ModelCheckpoint(save_top_k=-1, every_n_epochs=1)])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = trainer(2)
        first.fit(Tiny(), loader(), loader())
        ckpt = root / "lightning_logs" / "version_0" / "checkpoints" / "epoch=0-step=8.ckpt"
        assert ckpt.exists(), sorted(p.name for p in ckpt.parent.iterdir())
        trainer(3).fit(Tiny(), loader(), loader(), ckpt_path=str(ckpt))
    return root / "lightning_logs"


def test_one_version_reads_as_one_segment(runs):
    p = runs / "version_0" / "metrics.csv"
    assert detect_format(p) == "lightning"
    log = lightning.read(p)
    np.testing.assert_array_equal(log.series[LOSS].steps, np.arange(16))
    np.testing.assert_array_equal(log.series[VAL_LOSS].steps, [7, 15])
    np.testing.assert_array_equal(log.series[EPOCH].steps, np.arange(16))  # once per step, not per row
    with open(p, newline="") as f:
        expected = [float(r["train_loss"]) for r in csv.DictReader(f) if r["train_loss"]]
    np.testing.assert_array_equal(log.series[LOSS].values, expected)
    assert log.segments[0].note == "Lightning version_0" and log.metadata["version"] == 0


def test_directory_of_versions_is_one_run_with_a_rollback(runs):
    log = read_log(runs)  # checkpoints/*.ckpt and hparams.yaml are skipped, not errors
    assert log.format == "lightning" and len(log.sources) == 2
    assert [g.kind for g in log.segments] == ["start", "rollback"]
    assert (log.segments[1].first_step, log.segments[1].last_step) == (8, 23)
    s = log.summary()["metrics"]
    assert s[LOSS]["dead_points"] == 8 and s[VAL_LOSS]["dead_points"] == 1 and s[EPOCH]["dead_points"] == 8
    steps, _ = log.live(LOSS)
    np.testing.assert_array_equal(steps, np.arange(24))
    assert any(p.endswith(".ckpt") for p in log.metadata["skipped"])


def test_broken_metrics_csv_names_the_line(tmp_path):
    p = tmp_path / "version_0" / "metrics.csv"
    p.parent.mkdir()
    p.write_text("epoch,step,train_loss,val_loss\r\n0,0,1.5,\r\n0,1,oops,\r\n")
    with pytest.raises(LogFormatError) as e:
        lightning.read(p)
    assert e.value.where == "line 3" and "oops" in e.value.what
