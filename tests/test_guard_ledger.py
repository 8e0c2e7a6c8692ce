"""The guard's two kinds of state: the timeline (in every checkpoint, rolled back with it) and the
run ledger (``ledger.json`` beside the checkpoints, never rolled back) -- and its strict-JSON log."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)
F = torch.nn.functional

from lossguard.checkpoint.store import CheckpointStore  # noqa: E402
from evals.regression import regression_task  # noqa: E402
from lossguard.detect.outlier import OutlierConfig  # noqa: E402
from lossguard.guard import GuardConfig, StabilityGuard  # noqa: E402
from lossguard.io import read_log  # noqa: E402
from lossguard.recovery import LEDGER_FILE, RecoveryRecipe  # noqa: E402
from lossguard.testing.faults import Fault, FaultInjector  # noqa: E402

N, BS = 2048, 16


def make(tmp_path):
    model, sampler, loader = regression_task(N, batch_size=BS)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    det = OutlierConfig(min_points=20)
    cfg = GuardConfig(checkpoint_every=20, recipe=RecoveryRecipe(rollback_distance=20, skip_margin=10),
                      loss=det, grad_norm=det, lr_cut_from=1)
    guard = StabilityGuard(model, opt, store=CheckpointStore(tmp_path / "ckpt", keep_last=10), sampler=sampler,
                           config=cfg, log_path=tmp_path / "run.jsonl")
    return guard, loader


def run(guard, loader, steps, faults):
    inj = FaultInjector(faults)
    for step, (x, y) in guard.batches(loader, steps=steps):
        x, y = inj.batch(step, guard.batch_index, (x, y))
        loss = inj.loss(step, F.mse_loss(guard.model(x), y))
        loss.backward()
        inj.grads(step, guard.model)
        guard.step(loss)


def test_rollback_keeps_the_ledger_and_persists_it_beside_the_checkpoints(tmp_path):
    guard, loader = make(tmp_path)
    faults = [Fault(kind="nan_grad", step=25), Fault(kind="bad_data", batches=(50, 56), factor=8.0)]
    run(guard, loader, 90, faults)
    led = guard.ledger
    assert led.rollbacks == 1 and led.skip_ranges and led.cut("rollbacks") is not None
    assert led.skips >= 4  # the NaN step and the pocket's first bad steps: counted across the rollback
    on_disk = json.loads((tmp_path / "ckpt" / LEDGER_FILE).read_text())
    assert on_disk["rollbacks"] == 1 and on_disk["skip_ranges"] == [r.to_json() for r in led.skip_ranges]
    assert [h["event"] for h in on_disk["history"]][:2] == ["rollback", "lr_cut"]
    # the checkpoints hold the timeline only: no budget in them to restore by hand
    timeline = guard.store.load(guard.store.steps()[-1])["extras"]["guard"]
    assert set(timeline) == {"format", "judge", "policy", "data_count", "lr_ramp", "withheld",  # withheld: issue 23
                             "resume_watch",  # the losses the repeated-data test reads at a resume (issue 19)
                             "treatment"}  # the opt-in treatments' budgets (issue 20)
    assert set(timeline["policy"]) == {"episode", "overflow_streak", "level"}  # level: the loss-rise rule (issue 10)
    # a new process on the same store resumes with the ledger
    again, _ = make(tmp_path)
    assert again.ledger == led and again.restore() == guard.store.steps()[-1]


def test_event_log_is_strict_json_and_still_read_by_the_analyser(tmp_path):
    guard, loader = make(tmp_path)
    run(guard, loader, 40, [Fault(kind="nan_loss", step=30)])
    guard.close()
    lines = (tmp_path / "run.jsonl").read_text().splitlines()
    for line in lines:  # strict JSON: no bare NaN / Infinity
        json.loads(line, parse_constant=lambda c: pytest.fail(f"bare {c} in the log"))
    (skip,) = [e for e in guard.events if e["event"] == "skip"]
    assert skip["step"] == 30 and skip["loss"] is None
    log = read_log(tmp_path / "run.jsonl")
    steps, values = log.series["loss"].steps, log.series["loss"].values
    assert 30 in steps.tolist() and not (values[steps.tolist().index(30)] == values[steps.tolist().index(30)])
    assert any(e["event"] == "skip" and e["step"] == 30 for e in log.events)
