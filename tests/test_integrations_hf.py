"""The Hugging Face Trainer callback: a NaN gradient inside ``trainer.train()`` is skipped exactly,
and a persistent fault stops training with a diagnosis."""
from __future__ import annotations

import logging

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
torch.set_num_threads(1)
pytestmark = pytest.mark.slow  # transformers import + two Trainer runs: over a minute on the loaded machine

from lossguard.detect.outlier import OutlierConfig  # noqa: E402
from lossguard.guard import GuardConfig  # noqa: E402
from lossguard.integrations.hf import StabilityCallback  # noqa: E402


class NaNGradAt(transformers.TrainerCallback):
    """Fault: a NaN in one gradient right before the optimizer step (added before the guard)."""

    def __init__(self, steps):
        self.steps = set(steps)

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if state.global_step in self.steps:
            next(model.parameters()).grad.view(-1)[0] = float("nan")


class Snapshot(transformers.TrainerCallback):
    def __init__(self, at):
        self.at, self.snaps = at, {}

    def on_step_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if state.global_step in self.at:
            self.snaps[state.global_step] = ([p.detach().clone() for p in model.parameters()],
                                             {k: {n: v.clone() for n, v in s.items()}
                                              for k, s in optimizer.state_dict()["state"].items()})


def _train(tmp_path, callbacks, steps, **cfg):
    torch.manual_seed(0)
    mcfg = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(mcfg)
    g = torch.Generator().manual_seed(0)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (512, 16), generator=g)]
    det = OutlierConfig(min_points=20)
    guard_cb = StabilityCallback(GuardConfig(loss=det, grad_norm=det, **cfg), log_path=tmp_path / "run.jsonl")
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=steps,
                                          per_device_train_batch_size=8, learning_rate=1e-3, save_strategy="no",
                                          logging_strategy="no", report_to=[], use_cpu=True,
                                          dataloader_num_workers=0, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks + [guard_cb])
    trainer.train()
    return guard_cb, trainer


def test_nan_gradient_is_skipped_inside_trainer_train(tmp_path):
    snap = Snapshot({30, 31})
    cb, trainer = _train(tmp_path, [NaNGradAt({30}), snap], 40)
    assert [e["step"] for e in cb.guard.events if e["event"] == "skip"] == [30]
    (p30, s30), (p31, s31) = snap.snaps[30], snap.snaps[31]
    assert all(torch.equal(a, b) for a, b in zip(p30, p31, strict=True))
    assert all(torch.equal(s30[k][n], s31[k][n]) for k in s30 for n in s30[k])
    assert trainer.state.global_step == 40
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_persistent_fault_stops_training_loudly_and_for_good(tmp_path, caplog):
    """A halt is loud (issue 10): the diagnosis is printed with the test that fired and the loader
    positions to skip, and the process exits with ExitCode.HALT (the callback owns the exit under
    the restart protocol) instead of returning as if the run had finished. The halt is final: a
    relaunch on the same output_dir (torchrun restarts on any non-zero exit) refuses to train."""
    from lossguard.distributed.restart import ExitCode
    from lossguard.guard import TrainingHalted

    with pytest.raises(SystemExit) as e:
        _train(tmp_path, [NaNGradAt(range(25, 200))], 200, rollback_after=3)
    assert e.value.code == ExitCode.HALT == 77
    err = _halt_messages(caplog)
    assert "lossguard halted the run at step 27" in err and "non-finite loss or gradient x3" in err
    # 512 samples / batch 8 = 64 loader batches per epoch: step 25 is epoch 0, batch 25.
    assert "episode onset: step 25 = epoch 0, batch 25" in err
    assert isinstance(e.value.__cause__, TrainingHalted) and "Loader positions" in str(e.value.__cause__)
    # The relaunch: it exits 77 again at train begin, saying why and how to override.
    steps = []
    with pytest.raises(SystemExit) as again:
        _train(tmp_path, [NaNGradAt(()), _Steps(steps)], 200, rollback_after=3)
    assert again.value.code == 77 and steps == []
    err = _halt_messages(caplog)
    assert "halted this run before (at step 27)" in err and "clear_halt()" in err


class _Steps(transformers.TrainerCallback):
    """Records the optimizer steps the Trainer takes."""

    def __init__(self, steps):
        self.steps = steps

    def on_step_end(self, args, state, control, **kwargs):
        self.steps.append(state.global_step)


def test_resumed_trainer_run_keeps_detector_windows_and_ledger(tmp_path):
    """The callback is an HF ExportableState: trainer_state.json of a checkpoint holds the guard's
    timeline and ledger, and ``resume_from_checkpoint`` gives them back to a new Trainer's guard."""
    import json

    def trainer_for(steps, callbacks):
        torch.manual_seed(0)
        mcfg = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=2)
        g = torch.Generator().manual_seed(0)
        data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (512, 16), generator=g)]
        det = OutlierConfig(min_points=5, window=16, stride=4)
        cb = StabilityCallback(GuardConfig(loss=det, grad_norm=det, episode_gap=3), log_path=tmp_path / "run.jsonl")
        args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=steps, save_strategy="steps",
                                              save_steps=20, per_device_train_batch_size=8, learning_rate=1e-3,
                                              logging_strategy="no", report_to=[], use_cpu=True,
                                              dataloader_num_workers=0, disable_tqdm=True)
        return transformers.Trainer(model=transformers.GPT2LMHeadModel(mcfg), args=args, train_dataset=data,
                                    callbacks=callbacks + [cb])

    first = trainer_for(20, [NaNGradAt({12})])
    first.train()
    saved = json.loads((tmp_path / "out" / "checkpoint-20" / "trainer_state.json").read_text())
    state = saved["stateful_callbacks"]["StabilityCallback"]["attributes"]["restored_state"]
    assert state["ledger"]["skips"] == 1 and state["timeline"]["judge"]["loss"]["count"] == 20
    assert state["timeline"]["policy"]["episode"] is None  # step 12's episode closed after episode_gap

    seen = {}

    class Peek(transformers.TrainerCallback):
        def on_step_begin(self, args, st, control, **kwargs):
            if not seen:
                (cb,) = [c for c in resumed.callback_handler.callbacks if isinstance(c, StabilityCallback)]
                seen.update(skips=cb.guard.ledger.skips, count=cb.guard.judge.state_dict()["loss"]["count"],
                            step=cb.guard.step_count, episode_gap=cb.guard.config.episode_gap)

    resumed = trainer_for(22, [Peek()])
    resumed.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-20"))
    assert seen == {"skips": 1, "count": 20, "step": 20, "episode_gap": 3}


def _halt_messages(caplog) -> str:
    """What the halt told the user since the last call: the errors its module logged (on stderr by
    default, through logging's last-resort handler or the CLI's)."""
    text = "\n".join(r.getMessage() for r in caplog.records
                     if r.name == "lossguard.integrations._halt" and r.levelno == logging.ERROR)
    caplog.clear()
    return text
