"""HF ``transformers.Trainer`` output directories, written by the real Trainer, read as one run.

A tiny GPT-2 (built from a config: no download) trains on integer tokens with
``report_to="tensorboard"``, logging every step, evaluating and checkpointing every 20 steps. It
crashes at step 50 (an exception raised in a callback, as a failing step would) and is resumed with
``resume_from_checkpoint=".../checkpoint-40"``. What is on disk is what a user has: ``runs/<date>/``
with one event file per launch and ``checkpoint-{20,40,60}/trainer_state.json``.

The truth: the final ``trainer_state.json`` holds the history the model went through (steps 1-40
of the first launch, 41-60 of the resumed one); the first launch's own steps 41-49 were superseded.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from lossguard.errors import LossguardError
from lossguard.io import read_log
from lossguard.metrics import EPOCH, GRAD_NORM, LOSS, LR, VAL_LOSS

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CRASH_AT, RESUME_FROM, MAX_STEPS = 50, 40, 60


def _train(out: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    class Crash(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == CRASH_AT:
                raise RuntimeError("simulated crash")

    g = torch.Generator().manual_seed(0)
    data = []
    for _ in range(256):
        ids = torch.randint(0, 64, (16,), generator=g)
        data.append({"input_ids": ids, "labels": ids})

    def trainer(crash: bool) -> Trainer:
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2))
        args = TrainingArguments(output_dir=str(out), max_steps=MAX_STEPS, per_device_train_batch_size=4,
                                 logging_steps=1, save_steps=20, eval_strategy="steps", eval_steps=20,
                                 report_to=["tensorboard"], learning_rate=1e-3, use_cpu=True,
                                 dataloader_num_workers=0, disable_tqdm=True)
        return Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:16],
                       callbacks=[Crash()] if crash else [])

    with pytest.raises(RuntimeError, match="simulated crash"):
        trainer(True).train()
    time.sleep(1.1)  # the resumed launch's runs/<date> directory is named to the second
    trainer(False).train(resume_from_checkpoint=str(out / f"checkpoint-{RESUME_FROM}"))


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("hf") / "out"
    _train(out)
    return out


def _truth(out: Path) -> dict[str, dict[int, float]]:
    """metric -> step -> value from the final trainer_state.json (the live history)."""
    state = json.loads((out / f"checkpoint-{MAX_STEPS}" / "trainer_state.json").read_text())
    truth: dict[str, dict[int, float]] = {LOSS: {}, VAL_LOSS: {}, GRAD_NORM: {}, LR: {}}
    for rec in state["log_history"]:
        for key, metric in (("loss", LOSS), ("eval_loss", VAL_LOSS), ("grad_norm", GRAD_NORM), ("learning_rate", LR)):
            if key in rec:
                truth[metric][rec["step"]] = rec[key]
    return truth


def test_runs_directory_is_one_resume_not_a_restart_per_epoch_tag(hf_run, check_live):
    log = read_log(hf_run / "runs")
    assert log.format == "tensorboard"
    assert len(list((hf_run / "runs").rglob("events.out.tfevents.*"))) == 2
    # train/epoch is re-logged with every eval and the summary: still one segment per launch.
    assert [g.kind for g in log.segments] == ["start", "rollback"]
    assert log.segments[1].first_step == RESUME_FROM + 1
    assert {LOSS, VAL_LOSS, GRAD_NORM, LR, EPOCH} <= set(log.series)
    loss = log.series[LOSS]
    assert len(loss) == (CRASH_AT - 1) + (MAX_STEPS - RESUME_FROM)  # steps 1-49, then 41-60
    assert int((~loss.alive).sum()) == CRASH_AT - 1 - RESUME_FROM  # 41-49 of the crashed launch
    check_live(log, _truth(hf_run))
    assert log.live(VAL_LOSS)[0].tolist() == [20, 40, 60]
    assert log.live(EPOCH)[0].tolist() == list(range(1, MAX_STEPS + 1))


def test_output_directory_reads_each_point_once(hf_run, check_live):
    log = read_log(hf_run)
    assert log.format == "tensorboard"  # the events are the source of truth; trainer_state.json repeats them
    assert sorted(Path(s).parent.name for s in log.metadata["duplicate_sources"]) == [
        "checkpoint-20", "checkpoint-40", "checkpoint-60"]
    assert not any(s.endswith("trainer_state.json") for s in log.sources)
    assert [g.kind for g in log.segments] == ["start", "rollback"]
    assert len(log.series[LOSS]) == (CRASH_AT - 1) + (MAX_STEPS - RESUME_FROM)
    check_live(log, _truth(hf_run))


def test_checkpoints_alone_read_the_live_history(hf_run, check_live):
    log = read_log(hf_run, only="checkpoint-*/*")
    assert log.format == "hf_trainer_state"
    check_live(log, _truth(hf_run))
    assert log.summary()["rollbacks"] == 0 and log.summary()["dead_points"] == 0


def test_each_event_file_alone_is_one_segment(hf_run):
    for f in sorted((hf_run / "runs").rglob("events.out.tfevents.*")):
        log = read_log(f)
        assert len(log.segments) == 1, f


def test_unrelated_run_in_the_same_directory_is_an_error(hf_run, tmp_path):
    """A CSV of another run from step 1 beside the HF output: separate runs, named, never merged."""
    import shutil

    mixed = tmp_path / "mixed"
    shutil.copytree(hf_run / "runs", mixed / "runs")
    rows = "\n".join(f"{s},{5.0 + s * 0.01}" for s in range(1, 61))
    (mixed / "other.csv").write_text("step,loss\n" + rows + "\n")
    with pytest.raises(LossguardError, match="separate runs") as err:
        read_log(mixed)
    assert "other.csv" in str(err.value) and "--only" in str(err.value)
    assert read_log(mixed, only="runs/*").format == "tensorboard"
    assert read_log(mixed, only="*.csv").format == "csv"
