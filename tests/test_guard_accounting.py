"""Accounting, decided and tested: what a skipped step and a rollback do to the weights, Adam's t,
the LR schedule, the data stream and the step counter -- and exact resume of a guarded run."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)
F = torch.nn.functional

from lossguard.checkpoint.store import CheckpointStore  # noqa: E402
from evals.regression import regression_task  # noqa: E402
from lossguard.detect.outlier import OutlierConfig  # noqa: E402
from lossguard.guard import GuardConfig, SkipStepAdamW, StabilityGuard  # noqa: E402
from lossguard.recovery import RecoveryRecipe  # noqa: E402
from lossguard.testing.faults import Fault, FaultInjector  # noqa: E402

N, BS = 2048, 16


def make(tmp_path, opt="adamw", **cfg):
    model, sampler, loader = regression_task(N, batch_size=BS, dropout=0.1)
    o = (SkipStepAdamW if opt == "skipadamw" else torch.optim.AdamW)(model.parameters(), lr=1e-2, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(o, lambda s: min(1.0, (s + 1) / 10))
    det = OutlierConfig(min_points=20)
    base = dict(checkpoint_every=20, recipe=RecoveryRecipe(rollback_distance=20, skip_margin=10), loss=det, grad_norm=det)
    base.update(cfg)
    guard = StabilityGuard(model, o, store=CheckpointStore(tmp_path / "ckpt", keep_last=10), sampler=sampler,
                           scheduler=sched, config=GuardConfig(**base), log_path=tmp_path / "run.jsonl")
    return guard, loader


def snapshot(guard):
    return {"params": [p.detach().clone() for p in guard.model.parameters()],
            "opt": copy.deepcopy(guard.optimizer.state_dict()),
            "sched_epoch": guard.scheduler.last_epoch, "step": guard.step_count,
            "position": guard.sampler.position}


def same_weights_and_state(a, b):
    if not all(torch.equal(x, y) for x, y in zip(a["params"], b["params"])):
        return False
    for k, st in a["opt"]["state"].items():
        for name, v in st.items():
            if not torch.equal(torch.as_tensor(v), torch.as_tensor(b["opt"]["state"][k][name])):
                return False
    return True


@pytest.mark.parametrize("opt,stats", [("adamw", "host"), ("skipadamw", "device"), ("adamw", "device")])
def test_skipped_nan_step_accounting(tmp_path, opt, stats):
    guard, loader = make(tmp_path, opt=opt, stats=stats)
    inj = FaultInjector([Fault(kind="nan_grad", step=30)])
    snaps, batches = {}, []
    for step, (x, y) in guard.batches(loader, steps=40):
        batches.append(guard.batch_index)
        loss = F.mse_loss(guard.model(x), y)
        loss.backward()
        inj.grads(step, guard.model)
        if step in (30, 31):
            snaps[step] = snapshot(guard)
        guard.step(loss)
        if step in (29, 30):
            snaps[f"after{step}"] = snapshot(guard)
    before, after = snaps["after29"], snaps["after30"]
    assert same_weights_and_state(before, after)  # weights, both moments and Adam's t: bitwise
    t = [float(st["step"]) for st in after["opt"]["state"].values()]
    assert t == [30.0] * len(t)  # 31 steps run, one skipped
    assert after["sched_epoch"] == before["sched_epoch"] + 1  # the schedule follows the step counter
    assert after["step"] == 31 and batches[30] == 30 and batches[31] == 31  # batch consumed, not retried
    assert not same_weights_and_state(after, snapshot(guard))  # the run moved on afterwards
    assert [e["step"] for e in guard.events if e["event"] == "skip"] == [30]


def test_rollback_accounting(tmp_path):
    # onset 50 -> newest checkpoint <= 40; the margin as given (not capped to 5% of this 60-step run)
    guard, loader = make(tmp_path, recipe=RecoveryRecipe(rollback_distance=10, skip_margin=10, max_skip_fraction=1.0))
    inj = FaultInjector([Fault(kind="bad_data", batches=(50, 55), factor=5.0)])
    at_ckpt = None
    for step, (x, y) in guard.batches(loader, steps=60):
        if step == 40 and at_ckpt is None:
            at_ckpt = snapshot(guard)  # == the checkpoint of step 40 (saved after step 39)
        if guard.events and guard.events[-1]["event"] == "rollback" and "post" not in locals():
            post = snapshot(guard)
        x, y = inj.batch(step, guard.batch_index, (x, y))
        loss = F.mse_loss(guard.model(x), y)
        loss.backward()
        guard.step(loss)
    (rb,) = [e for e in guard.events if e["event"] == "rollback"]
    assert rb["to_step"] == 40 and rb["skip_batches"] == [50, 63]
    # Right after the rollback: step counter, weights, moments, Adam's t, LR schedule and data
    # position are the checkpoint's.
    assert post["step"] == 40 and post["sched_epoch"] == at_ckpt["sched_epoch"]
    assert post["position"] == at_ckpt["position"] == 41  # (taken after batch 40 was drawn)
    assert same_weights_and_state(at_ckpt, post)
    # Afterwards the data stream skipped the pocket plus the margin; the step counter did not jump.
    assert guard.sampler.skipped == [(50, 63)]
    assert guard.step_count == 60 and guard.sampler.position == 60 + 13


def test_guarded_run_resumes_exactly(tmp_path):
    """N steps straight == k steps, new objects restored from the checkpoint, N-k steps: bitwise."""
    def run(guard, loader, steps, faults):
        inj, losses = FaultInjector(faults), {}
        for step, (x, y) in guard.batches(loader, steps=steps):
            x, y = inj.batch(step, guard.batch_index, (x, y))
            loss = F.mse_loss(guard.model(x), y)
            loss.backward()
            inj.grads(step, guard.model)
            losses[step] = loss.item()
            guard.step(loss)
        return losses

    faults = [Fault(kind="nan_grad", step=25), Fault(kind="bad_data", batches=(70, 74), factor=5.0)]
    g1, l1 = make(tmp_path / "a")
    straight = run(g1, l1, 100, faults)
    g2, l2 = make(tmp_path / "b", stats="device")
    first = run(g2, l2, 60, faults)
    # fresh model, optimizer, sampler, guard on the same store; the detector windows cross from the
    # device twin to the host twin (same checkpoint format)
    g3, l3 = make(tmp_path / "b", stats="host")
    assert g3.restore() == 60
    rest = run(g3, l3, 100, faults[1:])
    resumed = {**first, **rest}
    assert resumed == straight  # bitwise-equal losses, rollback included
    for a, b in zip(g1.model.parameters(), g3.model.parameters()):
        assert torch.equal(a, b)
    assert g3.policy.rollbacks == g1.policy.rollbacks == 1
    assert g3.state_dict()["judge"]["loss"]["count"] == g1.state_dict()["judge"]["loss"]["count"]
