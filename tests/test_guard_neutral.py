"""The guard changes nothing on a healthy run (issue 23): same weights, optimizer state (Adam's t
included), scheduler and RNG draws, bitwise, as the same loop without the guard -- single process
with a CheckpointStore, and FSDP2 on 2 gloo ranks with a ShardedCheckpointStore (where the step-0
checkpoint used to give a fresh AdamW ``t = 1`` through ``get_state_dict``)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from lossguard.testing.distributed import run_distributed  # noqa: E402
from evals.guarded_loop import main as guarded_loop  # noqa: E402

from test_rollback_crash import assert_same, live_curve  # noqa: E402


@pytest.mark.parametrize("snapshots", [0, 2])
def test_guarded_healthy_run_is_the_plain_run_bitwise(tmp_path, snapshots):
    guarded_loop(["--steps", "60", "--every", "10", "--ckpt-dir", str(tmp_path / "ck"), "--snapshots", str(snapshots),
                  "--log", str(tmp_path / "g.jsonl"), "--out", str(tmp_path / "g.pt")])
    guarded_loop(["--steps", "60", "--no-guard", "--log", str(tmp_path / "p.jsonl"), "--out", str(tmp_path / "p.pt")])
    assert live_curve(tmp_path / "g.jsonl") == live_curve(tmp_path / "p.jsonl")
    guarded, plain = torch.load(tmp_path / "g.pt"), torch.load(tmp_path / "p.pt")
    assert_same(guarded, plain)  # model, optimizer (moments and step), scheduler, RNG
    assert all(int(s["step"]) == 60 for s in plain["optimizer"]["state"].values())


def _fsdp_worker(rank: int, world: int, tmpdir: str, guarded: bool, steps: int):
    from pathlib import Path

    from lossguard.checkpoint import ShardedCheckpointStore
    from lossguard.checkpoint.snapshot import _local
    from lossguard.data.iterate import iter_rng_neutral
    from lossguard.guard import GuardConfig, StabilityGuard
    from evals.fsdp_train_loop import build

    model, opt, sched, sampler, data = build(SimpleNamespace(layers=1, width=32, steps=steps), rank, world)
    losses = []
    if guarded:
        store = ShardedCheckpointStore(Path(tmpdir) / "ck", keep_last=2)
        guard = StabilityGuard(model, opt, store=store, sampler=sampler, scheduler=sched,
                               config=GuardConfig(checkpoint_every=5))
        for _, ids in guard.batches(sampler, steps=steps):
            _, loss = model(*data.batch(ids))
            loss.backward()
            guard.step(loss)
            losses.append(loss.item())
        guard.close()
    else:
        it = iter_rng_neutral(sampler)
        for _ in range(steps):
            _, loss = model(*data.batch(next(it)))
            loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
    return {"losses": losses, "model": [_local(p).detach().clone() for p in model.parameters()],
            "optim": [{k: _local(v).clone() if torch.is_tensor(v) else v for k, v in st.items()}
                      for st in opt.state.values()],
            "rng": torch.get_rng_state(), "lr": sched.get_last_lr()}


def _guarded_then_plain(rank: int, world: int, tmpdir: str, steps: int):
    """Both runs in one 2-rank launch (``build`` seeds each run afresh): one process group, not two."""
    return (_fsdp_worker(rank, world, tmpdir, True, steps), _fsdp_worker(rank, world, tmpdir, False, steps))


@pytest.mark.distributed
@pytest.mark.slow  # two 2-rank FSDP2 runs in one launch: ~20 s on a busy 2-core machine
def test_guarded_healthy_fsdp2_run_is_the_plain_run_bitwise(tmp_path):
    steps = 12
    both = run_distributed(_guarded_then_plain, world_size=2, args=(str(tmp_path), steps), timeout=300)
    guarded, plain = [g for g, _ in both], [p for _, p in both]
    for rank, (g, p) in enumerate(zip(guarded, plain, strict=True)):
        assert_same(g, p, f"rank {rank}")
        assert all(int(st["step"]) == steps for st in g["optim"])  # Adam's t: no zero-gradient step
