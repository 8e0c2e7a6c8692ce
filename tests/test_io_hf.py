"""HF ``trainer_state.json`` reader, on files written by transformers itself.

``TrainerState(...).save_to_json`` is the writer the Trainer uses for every checkpoint; the slow
test runs a real tiny ``Trainer`` on CPU and reads its output directory (checkpoints included).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from lossguard.errors import LogFormatError
from lossguard.io import detect_format, hf_trainer_state, read_log
from lossguard.metrics import EPOCH, GRAD_NORM, LOSS, LR, VAL_LOSS

transformers = pytest.importorskip("transformers")


def history(last_step: int, *, loss_at=lambda s: 4.0 - s / 100, every: int = 10, eval_every: int = 50):
    recs = []
    for s in range(every, last_step + 1, every):
        recs.append({"loss": loss_at(s), "grad_norm": 1.0 + s / 1000, "learning_rate": 1e-4 * (1 - s / 1000),
                     "epoch": s / 100, "step": s})
        if s % eval_every == 0:
            recs.append({"eval_loss": 3.5 - s / 200, "eval_runtime": 1.2, "epoch": s / 100, "step": s})
    return recs


def save_state(path: Path, recs: list[dict], global_step: int, summary: bool = False) -> Path:
    if summary:
        recs = recs + [{"train_runtime": 100.0, "train_loss": 9.99, "train_samples_per_second": 5.0,
                        "total_flos": 1e12, "epoch": global_step / 100, "step": global_step}]
    path.parent.mkdir(parents=True, exist_ok=True)
    transformers.TrainerState(global_step=global_step, max_steps=1000, log_history=recs).save_to_json(str(path))
    return path


def test_trainer_state_written_by_transformers(tmp_path):
    p = save_state(tmp_path / "trainer_state.json", history(200), 200, summary=True)
    assert detect_format(p) == "hf_trainer_state"
    log = hf_trainer_state.read(p)
    np.testing.assert_array_equal(log.series[LOSS].steps, np.arange(10, 201, 10))
    np.testing.assert_allclose(log.series[LOSS].values, 4.0 - np.arange(10, 201, 10) / 100)
    assert 9.99 not in log.series[LOSS].values  # the whole-run average is not a loss point
    assert log.metadata["train_summary"]["train_loss"] == 9.99
    np.testing.assert_array_equal(log.series[VAL_LOSS].steps, [50, 100, 150, 200])
    assert len(log.series[EPOCH]) == 20  # train and eval records share the step: epoch kept once
    assert {GRAD_NORM, LR} <= set(log.series)
    assert log.metadata["global_step"] == 200


def test_checkpoints_repeat_history_without_false_rollback(tmp_path):
    recs = history(300)
    for step in (100, 200, 300):
        save_state(tmp_path / f"checkpoint-{step}" / "trainer_state.json",
                   [r for r in recs if r["step"] <= step], step)
    log = read_log(tmp_path)
    s = log.summary()
    assert s["rollbacks"] == 0 and s["dead_points"] == 0 and len(log.segments) == 1
    assert s["metrics"][LOSS]["points"] == 30


def test_resume_from_older_checkpoint_is_a_rollback(tmp_path):
    old = history(300)
    # resumed from checkpoint-200 after the run reached 300: the new history shares steps <= 200
    new = [r for r in old if r["step"] <= 200] + [r for r in history(400, loss_at=lambda s: 2.0) if r["step"] > 200]
    a = save_state(tmp_path / "run1" / "checkpoint-300" / "trainer_state.json", old, 300)
    b = save_state(tmp_path / "run2" / "checkpoint-400" / "trainer_state.json", new, 400)
    os.utime(a, (1_000, 1_000))
    os.utime(b, (2_000, 2_000))
    log = read_log(tmp_path)
    assert [g.kind for g in log.segments] == ["start", "rollback"]
    assert log.segments[1].first_step == 210
    steps, values = log.live(LOSS)
    np.testing.assert_array_equal(steps, np.arange(10, 401, 10))
    assert values[20:].tolist() == [2.0] * 20
    assert log.summary()["metrics"][LOSS]["dead_points"] == 10  # steps 210..300 of the first history


@pytest.mark.parametrize("body, what", [
    ('{"log_history": [1, 2]}', "where a record object was expected"),
    ('{"log_history": "x"}', "no 'log_history' list"),
    ('{"log_history": [{"step": 1, "loss": "bad"}]}', "non-numeric value 'bad'"),
    ('{"log_history": [{"step": 2, "loss": 1}, {"step": 1, "loss": 1}]}', "steps go backwards"),
    ('{"log_history": [{"step": 2, "lo', "not valid JSON"),
    ('{"log_history": []}', "no train or eval records"),
])
def test_bad_input(tmp_path, body, what):
    p = tmp_path / "trainer_state.json"
    p.write_text(body)
    with pytest.raises(LogFormatError) as e:
        hf_trainer_state.read(p)
    assert what in e.value.what and e.value.fix and e.value.path == str(p)


@pytest.mark.slow
def test_real_tiny_trainer_run(tmp_path):
    pytest.importorskip("accelerate")
    import torch

    torch.set_num_threads(1)
    from transformers import Trainer, TrainingArguments

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def forward(self, x, labels=None):
            out = self.lin(x)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    class Data(torch.utils.data.Dataset):
        def __init__(self):
            g = torch.Generator().manual_seed(0)
            self.x = torch.randn(64, 4, generator=g)
            self.y = self.x.sum(1, keepdim=True)

        def __len__(self):
            return 64

        def __getitem__(self, i):
            return {"x": self.x[i], "labels": self.y[i]}

    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_train_epochs=2,
                             logging_steps=2, eval_strategy="steps", eval_steps=4, save_strategy="steps",
                             save_steps=8, report_to=[], use_cpu=True, learning_rate=0.05, disable_tqdm=True)
    trainer = Trainer(model=Tiny(), args=args, train_dataset=Data(), eval_dataset=Data())
    trainer.train()
    trainer.save_state()  # writes out/trainer_state.json beside checkpoint-8/ and checkpoint-16/
    log = read_log(tmp_path / "out")
    assert log.format == "hf_trainer_state" and log.summary()["rollbacks"] == 0
    np.testing.assert_array_equal(log.series[LOSS].steps, np.arange(2, 17, 2))  # 16 steps, logged every 2
    np.testing.assert_array_equal(log.series[VAL_LOSS].steps, [4, 8, 12, 16])
    final = trainer.state.log_history[-1]
    assert "train_loss" in final and final["train_loss"] not in log.series[LOSS].values
