"""FSDP2 on 2 gloo ranks: both ranks SIGKILLed inside or right after an in-process rollback, then
relaunched, end bitwise equal to the uninterrupted guarded run (issue 23). The sharded store's
checkpoint newer than the rollback target (step 40, saved before the pocket was seen) must never
be what the relaunch loads."""
from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from lossguard.testing.distributed import DistributedRunError, run_distributed  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.slow]  # 5 two-rank FSDP2 runs of <= 60 steps

STEPS = 60


def _worker(rank: int, world: int, ckpt: str, kill: str | None):
    from lossguard.checkpoint import ShardedCheckpointStore
    from lossguard.checkpoint.snapshot import _local
    from lossguard.detect.outlier import OutlierConfig
    from lossguard.guard import GuardConfig, StabilityGuard
    from lossguard.recovery import RecoveryRecipe
    from evals.fsdp_train_loop import build

    class Store(ShardedCheckpointStore):
        def supersede_after(self, step):
            if kill == "booked":
                os.kill(os.getpid(), signal.SIGKILL)
            return super().supersede_after(step)

    model, opt, sched, sampler, data = build(SimpleNamespace(layers=1, width=32, steps=STEPS), rank, world)
    det = OutlierConfig(min_points=20)
    cfg = GuardConfig(checkpoint_every=10, loss=det, grad_norm=det,
                      recipe=RecoveryRecipe(rollback_distance=10, skip_margin=10))
    store = Store(ckpt, keep_last=10)
    guard = StabilityGuard(model, opt, store=store, sampler=sampler, scheduler=sched, config=cfg)
    if store.agreed_steps():
        guard.restore()
    rollbacks = []
    for step, ids in guard.batches(sampler, steps=STEPS):
        if kill == "after" and guard.ledger.rollbacks:
            os.kill(os.getpid(), signal.SIGKILL)
        _, loss = model(*data.batch(ids))
        if 52 <= guard.batch_index < 58:
            loss = loss * 8.0  # a bad-data pocket on both ranks' slices
        loss.backward()
        guard.step(loss)
    guard.close()
    rollbacks = [(e["step"], e["to_step"]) for e in guard.events if e["event"] == "rollback"]
    return {"shards": [_local(p).detach().clone() for p in model.parameters()],
            "optim": [{k: _local(v).clone() if torch.is_tensor(v) else v for k, v in st.items()}
                      for st in opt.state.values()],
            "rng": torch.get_rng_state(), "rollbacks": rollbacks, "ledger": guard.ledger.to_dict()["skip_ranges"]}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    d = tmp_path_factory.mktemp("fsdp-ref")
    out = run_distributed(_worker, world_size=2, args=(str(d / "ck"), None), timeout=600)
    (rb,) = out[0]["rollbacks"]
    assert rb[1] == 40 and rb[0] > 50  # target 40; the step-50 checkpoint is the abandoned one
    return out


@pytest.mark.parametrize("point", ["booked", "after"])
def test_fsdp2_sigkill_in_or_after_a_rollback_resumes_bitwise(reference, tmp_path, point):
    ck = str(tmp_path / "ck")
    with pytest.raises(DistributedRunError):
        run_distributed(_worker, world_size=2, args=(ck, point), timeout=600)
    resumed = run_distributed(_worker, world_size=2, args=(ck, None), timeout=600)
    for rank, (got, want) in enumerate(zip(resumed, reference)):
        assert all(torch.equal(a, b) for a, b in zip(got["shards"], want["shards"])), rank
        for a, b in zip(got["optim"], want["optim"]):
            assert all(torch.equal(a[k], b[k]) if torch.is_tensor(b[k]) else a[k] == b[k] for k in b), rank
        assert torch.equal(got["rng"], want["rng"]) and got["ledger"] == want["ledger"]
