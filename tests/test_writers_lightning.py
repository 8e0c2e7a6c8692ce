"""Lightning run directories, written by the real loggers, read as one run.

A LightningModule logs ``train_loss`` (on step and on epoch) and ``val_loss`` through a
``TensorBoardLogger`` and a ``CSVLogger`` at once, with a ``LearningRateMonitor`` (column
``lr-SGD``); it calls ``save_hyperparameters()``, so the TensorBoardLogger writes ``hp_metric`` at
step 0 at the start of every ``fit``. It crashes at step 50 and is resumed with ``Trainer.fit(ckpt_path=<step 40 checkpoint>)``.
On disk: ``lightning_logs/version_{0..3}/`` holding event files plus ``hparams.yaml`` (contents
``{}``) and ``metrics.csv`` files, one version per launch and logger.

The oracle for the TensorBoard side is the CSVLogger's files (and the other way round): both
loggers received the same calls.
"""
from __future__ import annotations

import csv
import time
from pathlib import Path

import pytest

from lossguard.io import read_log
from lossguard.metrics import EPOCH, LOSS, LR, VAL_LOSS

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

CRASH_AT, MAX_STEPS = 50, 60


def _train(out: Path) -> None:
    from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    class Module(pl.LightningModule):
        def __init__(self, crash_at: int | None = None):
            super().__init__()
            self.save_hyperparameters()  # TensorBoardLogger then writes hp_metric at step 0 in every fit
            self.net = torch.nn.Linear(8, 1)
            self.crash_at = crash_at

        def training_step(self, batch, i):
            if self.crash_at is not None and self.global_step == self.crash_at:
                raise RuntimeError("simulated crash")
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            return loss

        def validation_step(self, batch, i):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.05)
            sched = torch.optim.lr_scheduler.StepLR(opt, 10, 0.9)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    g = torch.Generator().manual_seed(0)
    x = torch.randn(160, 8, generator=g)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))

    def loader():
        return torch.utils.data.DataLoader(data, batch_size=8)

    def trainer():
        return pl.Trainer(max_steps=MAX_STEPS, log_every_n_steps=5, val_check_interval=10, default_root_dir=str(out),
                          logger=[TensorBoardLogger(str(out)), CSVLogger(str(out))], enable_progress_bar=False,
                          enable_model_summary=False, accelerator="cpu", devices=1, num_sanity_val_steps=0,
                          callbacks=[LearningRateMonitor(logging_interval="step"),
                                     ModelCheckpoint(dirpath=str(out / "ckpt"), every_n_train_steps=20, save_top_k=-1)])

    pl.seed_everything(0, verbose=False)
    with pytest.raises(RuntimeError, match="simulated crash"):
        trainer().fit(Module(crash_at=CRASH_AT), loader(), loader())
    time.sleep(1.1)
    ckpt = next((out / "ckpt").glob("*step=40.ckpt"))
    trainer().fit(Module(), loader(), loader(), ckpt_path=str(ckpt))


@pytest.fixture(scope="module")
def pl_run(tmp_path_factory) -> Path:
    import logging
    import warnings

    torch.set_num_threads(1)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    out = tmp_path_factory.mktemp("pl") / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _train(out)
    return out


def _csv_truth(out: Path) -> dict[str, dict[int, float]]:
    """metric -> step -> value of the live timeline, stitched by hand from the CSVLogger files."""
    files = sorted((out / "lightning_logs").glob("version_*/metrics.csv"), key=lambda p: p.stat().st_mtime)
    assert len(files) == 2
    launches = []
    for f in files:
        pts: dict[str, dict[int, float]] = {LOSS: {}, VAL_LOSS: {}, LR: {}}
        with open(f) as fh:
            for row in csv.DictReader(fh):
                for col, metric in (("train_loss_step", LOSS), ("val_loss", VAL_LOSS), ("lr-SGD", LR)):
                    if row.get(col):
                        pts[metric][int(row["step"])] = float(row[col])
        launches.append(pts)
    resumed_from = min(min(p) for p in launches[1].values() if p)
    return {m: {**{s: v for s, v in launches[0][m].items() if s < resumed_from}, **launches[1][m]} for m in launches[0]}


def test_run_directory_is_one_rollback_and_each_point_once(pl_run, check_live):
    log = read_log(pl_run / "lightning_logs")
    assert log.format == "tensorboard"
    assert [g.kind for g in log.segments] == ["start", "rollback"]
    # The same calls went to metrics.csv: one source is read, never both.
    assert sorted(Path(s).name for s in log.metadata["duplicate_sources"]) == ["metrics.csv", "metrics.csv"]
    versions = list((pl_run / "lightning_logs").glob("version_*"))
    assert len(versions) == 4  # two launches, two loggers; each logger writes hparams.yaml
    assert sorted(Path(s).name for s in log.metadata["skipped"]) == ["hparams.yaml"] * 4
    assert {LOSS, VAL_LOSS, LR, EPOCH, "train_loss_epoch"} <= set(log.series)
    assert not any(m.startswith("lr_") for m in log.series)  # lr-SGD is the LR
    truth = _csv_truth(pl_run)
    assert truth[VAL_LOSS] and truth[LR]
    check_live(log, truth)
    assert log.live("train_loss_epoch")[0].size == 3  # one per epoch of 20 steps, all live
    # hp_metric at step 0 in the resumed fit does not make the resume a rollback to step 0
    assert log.segments[1].first_step == 44 and log.live("hp_metric")[0].tolist() == [0]
    assert int((~log.series[LOSS].alive).sum()) == len(log.series[LOSS]) - len(truth[LOSS])


def test_csv_logger_alone(pl_run, check_live):
    log = read_log(pl_run / "lightning_logs", only="*.csv")
    assert log.format == "lightning"
    assert [g.kind for g in log.segments] == ["start", "rollback"]
    check_live(log, _csv_truth(pl_run))


def test_tensorboard_logger_version_directory_with_hparams(pl_run):
    """One version directory (events + hparams.yaml), and each event file alone: one segment each,
    although Lightning writes ``epoch`` two or three times per validation step."""
    for version in sorted((pl_run / "lightning_logs").glob("version_*")):
        events = list(version.glob("events.out.tfevents.*"))
        if not events:
            continue
        log = read_log(version)
        assert len(log.segments) == 1 and log.summary()["dead_points"] == 0
        assert read_log(events[0]).series[VAL_LOSS].alive.all()
