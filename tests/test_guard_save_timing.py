"""The guard's checkpoint saves and loads are timed in its log, and an asynchronous save in flight
has a handle (issue 23)."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from lossguard.checkpoint import CheckpointStore  # noqa: E402
from lossguard.checkpoint.sharded import PendingSave, ShardedCheckpointStore  # noqa: E402
from lossguard.detect.outlier import OutlierConfig  # noqa: E402
from lossguard.guard import GuardConfig, StabilityGuard  # noqa: E402
from lossguard.recovery import RecoveryRecipe  # noqa: E402
from lossguard.testing.faults import Fault, FaultInjector  # noqa: E402
from evals.regression import regression_task  # noqa: E402


def _run(tmp_path, store, steps, faults=()):
    model, sampler, loader = regression_task(2048, batch_size=16)
    det = OutlierConfig(min_points=20)
    cfg = GuardConfig(checkpoint_every=10, loss=det, grad_norm=det,
                      recipe=RecoveryRecipe(rollback_distance=10, skip_margin=10))
    guard = StabilityGuard(model, torch.optim.AdamW(model.parameters(), lr=1e-2), store=store, sampler=sampler,
                           config=cfg, log_path=tmp_path / "run.jsonl")
    inj = FaultInjector(list(faults))
    handles = []
    for step, (x, y) in guard.batches(loader, steps=steps):
        x, y = inj.batch(step, guard.batch_index, (x, y))
        loss = F.mse_loss(guard.model(x), y)
        loss.backward()
        guard.step(loss)
        if guard.pending_save is not None:
            handles.append(guard.pending_save)
    guard.close()
    recs = [json.loads(x) for x in (tmp_path / "run.jsonl").read_text().splitlines()]
    return guard, [r for r in recs if str(r.get("event", "")).startswith("checkpoint")], handles


def test_sync_saves_and_rollback_load_are_timed(tmp_path):
    guard, timed, _ = _run(tmp_path, CheckpointStore(tmp_path / "ck", keep_last=10), 60,
                           [Fault(kind="bad_data", batches=(40, 46), factor=8.0)])
    saves = [r for r in timed if r["event"] == "checkpoint_save"]
    assert [r["step"] for r in saves][:4] == [0, 10, 20, 30] and all(r["mode"] == "sync" for r in saves)
    assert all(0 < r["seconds"] < 30 for r in saves)
    (load,) = [r for r in timed if r["event"] == "checkpoint_load"]
    assert load["source"] == "disk" and load["seconds"] > 0 and load["step"] == guard.ledger.last_rollback["to_step"]
    assert not [e for e in guard.events if e["event"].startswith("checkpoint_save")]  # not decisions


def test_async_saves_log_their_completion_and_have_a_handle(tmp_path):
    store = ShardedCheckpointStore(tmp_path / "ck", keep_last=3, async_saves=True)
    guard, timed, handles = _run(tmp_path, store, 30)
    saves = [r for r in timed if r["event"] == "checkpoint_save"]
    done = [r for r in timed if r["event"] == "checkpoint_saved"]
    assert [r["step"] for r in saves] == [0, 10, 20, 30] and all(r["mode"] == "async" for r in saves)
    assert [r["step"] for r in done] == [0, 10, 20, 30]  # every async save's completion, close() included
    assert all(r["seconds"] > 0 for r in done)  # from the call to the publication
    assert handles and all(isinstance(h, PendingSave) for h in handles)
    assert all(h.done() and h.seconds > 0 for h in handles) and guard.pending_save is None
    assert store.steps() == [10, 20, 30]
