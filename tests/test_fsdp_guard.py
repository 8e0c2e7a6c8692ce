"""The guard on a fully_shard'ed model, 2 real ranks over gloo: faults on rank 1's data only make
both ranks skip and roll back at the same steps (one packed all-reduce per step), the rollback
restores a DCP checkpoint from a ShardedCheckpointStore, and the ranks finish in step."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from lossguard.testing.distributed import run_distributed  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.slow]  # ~150 FSDP steps on 2 ranks


def _fsdp_guard_worker(rank: int, world: int, tmpdir: str, gate: str, asynchronous: bool, snapshots: int = 0):
    from pathlib import Path

    from lossguard.checkpoint import ShardedCheckpointStore
    from lossguard.checkpoint.snapshot import _local
    from lossguard.detect.outlier import OutlierConfig
    from lossguard.guard import GuardConfig, SkipStepAdamW, StabilityGuard
    from lossguard.recovery import RecoveryRecipe
    from evals.fsdp_train_loop import build

    model, opt, sched, sampler, data = build(SimpleNamespace(layers=1, width=32, steps=150), rank, world)
    if gate == "device":  # the skip selected on the device, on the sharded optimizer state
        opt = SkipStepAdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
        sched = None
    det = OutlierConfig(min_points=20)
    cfg = GuardConfig(checkpoint_every=20, recipe=RecoveryRecipe(rollback_distance=20, skip_margin=10),
                      loss=det, grad_norm=det, gate=gate)
    store = ShardedCheckpointStore(Path(tmpdir) / f"{gate}-{snapshots}" / "ck", keep_last=3, min_keep_steps_back=40,
                                   async_saves=asynchronous)
    guard = StabilityGuard(model, opt, store=store, sampler=sampler, scheduler=sched, config=cfg,
                           log_path=Path(tmpdir) / f"{gate}-{snapshots}" / "run.jsonl", snapshots=snapshots)
    for step, ids in guard.batches(sampler, steps=150):
        x, y = data.batch(ids)
        _, loss = model(x, y)
        if rank == 1 and step == 50:
            loss = loss * float("nan")          # a NaN on one rank only
        if rank == 1 and 100 <= guard.batch_index < 106:
            loss = loss * 8.0                   # a bad-data pocket in rank 1's shard of the data
        loss.backward()
        guard.step(loss)
    guard.close()
    decisions = [(e["step"], e["event"], e.get("to_step")) for e in guard.log.records]
    return {"decisions": decisions, "step": guard.step_count, "skipped": guard.sampler.skipped,
            "ledger": guard.ledger.to_dict()["skip_ranges"],
            "finite": all(bool(torch.isfinite(_local(p)).all()) for p in model.parameters()),
            "ckpts": store.agreed_steps(),
            "sources": [e.get("source") for e in guard.log.records if e["event"] == "rollback"],
            "shards": [_local(p).detach().clone() for p in model.parameters()]}


@pytest.mark.parametrize("gate, asynchronous", [("host", True), ("device", False)])
def test_faults_on_one_rank_make_both_fsdp_ranks_act_alike(tmp_path, gate, asynchronous):
    """Host gate with asynchronous guard checkpoints; device gate with synchronous ones."""
    r0, r1 = run_distributed(_fsdp_guard_worker, world_size=2, args=(str(tmp_path), gate, asynchronous),
                             timeout=300)
    assert r0["decisions"] == r1["decisions"]  # rank 1 writes no log: its in-memory list is compared
    events = {(s, ev) for s, ev, _ in r0["decisions"]}
    assert (50, "skip") in events                       # the NaN step withheld on both ranks
    (rb,) = [d for d in r0["decisions"] if d[1] == "rollback"]
    assert rb[2] == 80                                  # newest checkpoint >= 20 steps before onset 100
    assert r0["skipped"] == r1["skipped"] and r0["skipped"] and r0["skipped"][0][0] == 100
    assert r0["ledger"] == r1["ledger"]
    assert r0["step"] == r1["step"] == 150
    assert r0["finite"] and r1["finite"]                # no NaN reached any shard
    assert r0["ckpts"] == r1["ckpts"] and 80 in r0["ckpts"]


def _disk_then_memory(rank: int, world: int, tmpdir: str):
    """The disk and the in-memory run in one launch (``build`` seeds each afresh; separate
    directories): one process group instead of two."""
    return (_fsdp_guard_worker(rank, world, tmpdir, "host", False, 0),
            _fsdp_guard_worker(rank, world, tmpdir, "host", False, 3))


def test_rollback_from_host_snapshots_equals_rollback_from_disk(tmp_path):
    """The guard keeping the last 3 checkpoints in host memory rolls back without reading a file,
    and the run ends bitwise where the run that read the DCP checkpoint ends."""
    both = run_distributed(_disk_then_memory, world_size=2, args=(str(tmp_path),), timeout=300)
    for d, m in both:
        assert d["sources"] == ["disk"] and m["sources"] == ["memory"]
        assert [x[:2] for x in d["decisions"]] == [x[:2] for x in m["decisions"]]
        assert all(torch.equal(a, b) for a, b in zip(d["shards"], m["shards"], strict=True))
