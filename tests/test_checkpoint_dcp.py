"""Sharded checkpoints on 2 real FSDP2 ranks over gloo: DCP save/load through ShardedCheckpointStore
(atomic, checksummed, pruned, damaged ones passed over on both ranks), async saves, the in-memory
snapshot, and a restored run that continues bitwise like the uninterrupted one."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from lossguard.testing.distributed import run_distributed  # noqa: E402

pytestmark = [pytest.mark.distributed]


def _train(model, opt, sched, sampler, data, state, n):
    """n steps of the fsdp_train_loop recipe; returns the losses as exact floats."""
    from lossguard.distributed.fsdp import reduce_step_stats

    losses = []
    for _ in range(n):
        x, y = data.batch(next(iter(sampler)))
        _, loss = model(x, y)
        loss.backward()
        stats = reduce_step_stats(loss, model.parameters())
        if not bool(stats.any_nonfinite):
            opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        state.step += 1
        losses.append(float(stats.loss))
    return losses


def _shards(model, opt):
    from lossguard.checkpoint.snapshot import _local

    out = [_local(v).clone() for v in model.state_dict().values()]
    for st in opt.state.values():
        out += [_local(v).clone() for _, v in sorted(st.items()) if torch.is_tensor(v)]
    return out


def _scenario(rank: int, world: int, tmpdir: str):
    """One 2-rank FSDP2 run exercising every store path; returns what the tests compare."""
    import warnings
    from pathlib import Path

    from lossguard.checkpoint import HostSnapshot, ShardedCheckpointStore, ShardedTrainState
    from lossguard.errors import CheckpointError
    from evals.fsdp_train_loop import build

    args = SimpleNamespace(layers=2, width=32, steps=30)
    model, opt, sched, sampler, data = build(args, rank, world)
    state = ShardedTrainState(model, opt, scheduler=sched, data=sampler)
    store = ShardedCheckpointStore(Path(tmpdir) / "ck", keep_last=2, async_saves=True)
    out = {}
    _train(model, opt, sched, sampler, data, state, 4)
    state.save(store)                                   # step 4, sync
    snap = HostSnapshot(state, every=4)
    snap.maybe_take(state.step)                         # step 4, in memory
    straight = _train(model, opt, sched, sampler, data, state, 4)
    pending = state.async_save(store)                   # step 8, async; training goes on meanwhile
    straight += _train(model, opt, sched, sampler, data, state, 4)
    out["async_path"] = str(pending.wait())
    state.save(store)                                   # step 12, sync; prunes step 4 (keep_last=2)
    out["straight"], out["end"] = straight, _shards(model, opt)
    out["steps_after_prune"] = store.agreed_steps()

    # rollback from memory: back to step 4, train 8 steps again
    out["snap_step"] = snap.restore()
    out["from_memory"] = _train(model, opt, sched, sampler, data, state, 8)
    out["end_memory"] = _shards(model, opt)

    # rollback from disk, with a fresh store as a restarted process would build it
    store2 = ShardedCheckpointStore(Path(tmpdir) / "ck", keep_last=2, async_saves=False)
    out["restored"] = state.restore(store2, 8)
    out["from_disk"] = _train(model, opt, sched, sampler, data, state, 4)
    out["end_disk"] = _shards(model, opt)

    # protection keeps a rollback target through pruning
    store2.protect(8)
    for _ in range(2):
        _train(model, opt, sched, sampler, data, state, 1)
        state.save(store2)
    out["steps_protected"] = store2.agreed_steps()      # 8 protected + the two newest

    # damage rank 1's shard of the newest checkpoint: both ranks pass over it to the older one
    newest = store2.agreed_steps()[-1]
    if rank == 0:
        shard = store2.path_of(newest) / "__1_0.distcp"
        raw = bytearray(shard.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        shard.write_bytes(bytes(raw))
    torch.distributed.barrier()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out["newest_after_damage"] = state.restore(store2)
    out["warned"] = [str(w.message) for w in caught]
    try:
        state.restore(store2, newest)
        out["explicit_damaged"] = "loaded"
    except CheckpointError as exc:
        out["explicit_damaged"] = str(exc)
    # truncate a file only rank 1 checks the size of (file k of the sorted manifest goes to rank
    # k % 2): rank 0 finds nothing wrong, yet both refuse the step before loading a single tensor
    older = store2.agreed_steps()[0]  # not the step the model holds now: a load of it would show
    names = sorted(json.loads((store2.path_of(older) / "manifest.json").read_text())["files"])
    if rank == 0:
        victim = store2.path_of(older) / names[1]
        victim.write_bytes(victim.read_bytes()[:-7])
    torch.distributed.barrier()
    before = _shards(model, opt)
    try:
        state.restore(store2, older)
        out["explicit_truncated"] = "loaded"
    except CheckpointError as exc:
        out["explicit_truncated"] = str(exc)
    out["untouched_by_refused_load"] = all(torch.equal(a, b) for a, b in zip(before, _shards(model, opt)))
    out["truncated_name"] = names[1]
    if rank == 0:
        out["manifest"] = json.loads((store2.path_of(8) / "manifest.json").read_text())
        out["listing"] = sorted(p.name for p in Path(tmpdir, "ck").iterdir())
    return out


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dcp")
    return run_distributed(_scenario, world_size=2, args=(str(tmp),), timeout=240)


def test_rollback_from_disk_continues_bitwise_like_the_uninterrupted_run(scenario):
    for r in scenario:
        assert r["restored"] == 8
        assert r["from_disk"] == r["straight"][4:]  # steps 9..12, exact floats
        assert all(torch.equal(a, b) for a, b in zip(r["end_disk"], r["end"]))


def test_rollback_from_the_in_memory_snapshot_is_bitwise_too(scenario):
    for r in scenario:
        assert r["snap_step"] == 4
        assert r["from_memory"] == r["straight"]
        assert all(torch.equal(a, b) for a, b in zip(r["end_memory"], r["end"]))


def test_both_ranks_see_the_same_loss_and_hold_different_shards(scenario):
    r0, r1 = scenario
    assert r0["straight"] == r1["straight"]  # the loss is the all-reduced mean
    assert not all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(r0["end"], r1["end"]))


def test_async_save_publishes_a_complete_checksummed_checkpoint(scenario):
    r0 = scenario[0]
    assert r0["async_path"].endswith("step-00000008")
    files = r0["manifest"]["files"]
    assert r0["manifest"]["format"] == 2 and r0["manifest"]["world_size"] == 2
    assert set(files) == {"__0_0.distcp", "__1_0.distcp", ".metadata"}  # rank states: items of the shards
    assert all(len(f.get("crc32c", f.get("crc32", ""))) == 8 and f["size"] > 0 for f in files.values())  # crc32c: issue 23
    assert not [n for n in r0["listing"] if n.startswith(".")]  # no temp dirs left behind


def test_keep_last_prunes_and_protect_keeps_the_rollback_target(scenario):
    r0, r1 = scenario
    assert r0["steps_after_prune"] == r1["steps_after_prune"] == [8, 12]
    assert r0["steps_protected"] == r1["steps_protected"] == [8, 13, 14]


def test_a_damaged_shard_is_passed_over_on_every_rank(scenario):
    for r in scenario:
        assert r["newest_after_damage"] == 13  # 14 is damaged, both ranks fall back together
        assert any("CRC-32" in w and "step-00000014" in w for w in r["warned"])
        assert "CRC-32" in r["explicit_damaged"] and "__1_0.distcp" in r["explicit_damaged"]


def test_a_file_only_one_rank_checks_is_refused_on_every_rank_before_loading(scenario):
    for r in scenario:
        assert r["truncated_name"] == "__0_0.distcp"  # rank 1's share
        assert "not loadable" in r["explicit_truncated"] and "__0_0.distcp has" in r["explicit_truncated"]
        assert r["untouched_by_refused_load"]


def test_single_process_sharded_store_round_trip(tmp_path):
    """Without a process group the store still works (world size 1, no collectives)."""
    from lossguard.checkpoint import ShardedCheckpointStore, ShardedTrainState
    from lossguard.errors import CheckpointError

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    state = ShardedTrainState(model, opt, step=1)
    store = ShardedCheckpointStore(tmp_path / "ck")
    store.save(1, state.state_dict())
    before = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    state.step = 99
    assert state.restore(store) == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with pytest.raises(CheckpointError, match="template"):
        store.load(1)
    from lossguard.checkpoint import CheckpointStore

    with pytest.raises(CheckpointError, match="sharded checkpoint"):
        CheckpointStore(tmp_path / "ck").load(1)  # the whole-model store says what this is
