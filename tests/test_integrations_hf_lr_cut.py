"""The HF callback applies the run ledger's LR cut (a relaunch after a rollback must not train at the
full LR again): scheduled LR x factor from the cut's start step on, unchanged before, never compounded."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from lossguard.integrations.hf import StabilityCallback  # noqa: E402
from lossguard.recovery.ledger import LEDGER_FILE, LrCut, RunLedger  # noqa: E402

START, FACTOR, STEPS, GAMMA, LR = 4, 0.1, 9, 0.8, 1e-2


class LrSeen(transformers.TrainerCallback):
    """The LR each optimizer step uses (read after the guard's callback scaled it) and the LR the
    groups hold right after the step (before the scheduler steps)."""

    def __init__(self):
        self.used, self.after = [], []

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        self.used.append(optimizer.param_groups[0]["lr"])

    def on_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        self.after.append(optimizer.param_groups[0]["lr"])


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def forward(self, x, labels):
        return {"loss": torch.nn.functional.mse_loss(self.net(x), labels)}


def test_relaunched_trainer_applies_the_ledgers_lr_cut_without_compounding(tmp_path, caplog):
    torch.set_num_threads(1)
    out = tmp_path / "out"
    out.mkdir()
    # What a relaunch finds: a cut booked before the restart, in the ledger beside the checkpoints.
    ledger = RunLedger.open(out / LEDGER_FILE)
    ledger.set_lr_cut(LrCut(start_step=START, until_step=None, factor=FACTOR, cause="recurrence"))
    ledger.save()

    torch.manual_seed(0)
    model = Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    # Chainable scheduler (lr <- lr * gamma each step): an unrestored cut would compound through it.
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=GAMMA)
    g = torch.Generator().manual_seed(0)
    data = [{"x": x, "labels": x.sum(-1, keepdim=True)} for x in torch.randn(64, 4, generator=g)]
    seen = LrSeen()
    args = transformers.TrainingArguments(output_dir=str(out), max_steps=STEPS, per_device_train_batch_size=4,
                                          save_strategy="no", logging_strategy="no", report_to=[], use_cpu=True,
                                          dataloader_num_workers=0, disable_tqdm=True)
    guard_cb = StabilityCallback(log_path=tmp_path / "run.jsonl")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, optimizers=(opt, sched),
                                   callbacks=[guard_cb, seen])
    trainer.train()

    scheduled = [LR * GAMMA ** t for t in range(STEPS)]
    assert len(seen.used) == STEPS
    for t in range(STEPS):
        want = scheduled[t] * (FACTOR if t >= START else 1.0)
        assert seen.used[t] == pytest.approx(want, rel=1e-9), t
        assert seen.after[t] == pytest.approx(scheduled[t], rel=1e-9), t  # put back before the scheduler
    assert opt.param_groups[0]["lr"] == pytest.approx(LR * GAMMA ** STEPS, rel=1e-9)
    announced = [r for r in caplog.records
                 if r.name == "lossguard.integrations._lr_cut" and "LR cut is in force" in r.getMessage()]
    assert len(announced) == 1 and f"at step {START}" in announced[0].getMessage()  # once, when it starts
    assert guard_cb.guard.ledger.lr_factor(STEPS) == FACTOR  # the booking itself is unchanged
