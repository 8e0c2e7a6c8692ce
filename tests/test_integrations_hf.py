"""The Hugging Face Trainer callback: a NaN gradient inside ``trainer.train()`` is skipped exactly,
and a persistent fault stops training with a diagnosis."""
from __future__ import annotations

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
    assert all(torch.equal(a, b) for a, b in zip(p30, p31))
    assert all(torch.equal(s30[k][n], s31[k][n]) for k in s30 for n in s30[k])
    assert trainer.state.global_step == 40
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_persistent_fault_stops_training(tmp_path):
    cb, trainer = _train(tmp_path, [NaNGradAt(range(25, 200))], 200, rollback_after=3)
    (halt,) = [e for e in cb.guard.events if e["event"] == "halt"]
    assert halt["step"] == 27 and trainer.state.global_step < 35
