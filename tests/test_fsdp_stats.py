"""FSDP2 on 2 real ranks over gloo: the global gradient norm from local shards (no gathering) matches
torch's, and one all-reduce of the packed step statistics gives both ranks the same verdict --
a NaN on one rank's loss is skipped on both, and the ranks stay identical to a NaN-free run."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from lossguard.testing.distributed import run_distributed  # noqa: E402

pytestmark = [pytest.mark.distributed]


def _stats_worker(rank: int, world: int):
    import torch.distributed as dist
    from torch.distributed.tensor import Replicate, distribute_tensor

    from lossguard.checkpoint.snapshot import _local
    from lossguard.distributed.fsdp import global_grad_norm, local_grad_sq, reduce_step_stats
    from evals.fsdp_train_loop import build

    out = {}
    model, opt, sched, sampler, data = build(SimpleNamespace(layers=2, width=32, steps=20), rank, world)
    calls = []
    real = dist.all_reduce
    dist.all_reduce = lambda *a, **k: (calls.append(a[0].numel()), real(*a, **k))[1]
    try:
        x, y = data.batch(next(iter(sampler)))
        _, loss = model(x, y)
        loss.backward()
        calls.clear()
        stats = reduce_step_stats(loss, model.parameters())
        out["collectives"] = list(calls)  # exactly one, of 3 numbers
    finally:
        dist.all_reduce = real
    grads = [p.grad for p in model.parameters()]
    out["torch_norm"] = float(torch.nn.utils.get_total_norm(grads).full_tensor())
    out["norm"] = float(stats.grad_norm)
    out["full_norm"] = float(torch.linalg.vector_norm(torch.stack(
        [torch.linalg.vector_norm(g.full_tensor().double()) for g in grads])))
    out["loss"], out["local_loss"] = float(stats.loss), float(loss)
    # clipping through the local shards: the clipped norm is max_norm
    global_grad_norm(model.parameters(), max_norm=0.5)
    out["clipped"] = float(global_grad_norm(model.parameters()))
    # a replicated DTensor counts once, not once per rank
    mesh = model.wte.weight.device_mesh
    rep = torch.nn.Parameter(distribute_tensor(torch.full((3,), 2.0), mesh, [Replicate()]))
    rep.grad = distribute_tensor(torch.full((3,), 2.0), mesh, [Replicate()])
    sq = local_grad_sq([rep], world_size=world)
    dist.all_reduce(sq)
    out["replicated_sq"] = float(sq)
    # an Inf in one rank's gradient shard: every rank's verdict says non-finite
    opt.zero_grad(set_to_none=True)
    _, loss = model(x, y)
    loss.backward()
    if rank == 1:
        next(p for p in model.parameters() if _local(p.grad).numel()).grad.to_local()[0] = float("inf")
    s = reduce_step_stats(loss, model.parameters())
    out["inf"] = (float(s.grad_norm), bool(s.any_nonfinite), float(s.nonfinite_ranks))
    return out


def test_sharded_grad_norm_matches_torch_from_one_small_all_reduce():
    r0, r1 = run_distributed(_stats_worker, world_size=2, timeout=180)
    for r in (r0, r1):
        assert r["collectives"] == [3]
        assert r["norm"] == pytest.approx(r["torch_norm"], rel=1e-6)
        assert r["norm"] == pytest.approx(r["full_norm"], rel=1e-6)
        assert r["clipped"] == pytest.approx(0.5, rel=1e-5)
        assert r["replicated_sq"] == pytest.approx(12.0)
        assert r["inf"] == (float("inf"), True, 1.0)
    assert r0["norm"] == r1["norm"] and r0["loss"] == r1["loss"]  # bitwise the same on both ranks
    assert r0["local_loss"] != r1["local_loss"]  # different data per rank, one global mean
    assert r0["loss"] == pytest.approx((r0["local_loss"] + r1["local_loss"]) / 2, rel=1e-12)


def _nan_worker(rank: int, world: int, nan_at):
    from lossguard.distributed.fsdp import reduce_step_stats
    from evals.fsdp_train_loop import build

    model, opt, sched, sampler, data = build(SimpleNamespace(layers=1, width=32, steps=12), rank, world)
    skipped, losses = [], []
    for step in range(1, 13):
        ids = next(iter(sampler))
        if step == nan_at:
            torch.manual_seed(5000 + rank)  # same dropout stream either way after the fault
        x, y = data.batch(ids)
        _, loss = model(x, y)
        if step == nan_at and rank == 1:
            loss = loss * float("nan")
        loss.backward()
        stats = reduce_step_stats(loss, model.parameters())
        skip = bool(stats.any_nonfinite)
        if skip:
            skipped.append(step)
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(stats.loss))
    from lossguard.checkpoint.snapshot import _local

    return {"skipped": skipped, "losses": losses,
            "params": [_local(p).detach().clone() for p in model.parameters()]}


def _skip_worker(rank: int, world: int):
    """The reference: the same run with step 6 withheld on purpose (no NaN anywhere)."""
    from evals.fsdp_train_loop import build

    model, opt, sched, sampler, data = build(SimpleNamespace(layers=1, width=32, steps=12), rank, world)
    from lossguard.checkpoint.snapshot import _local
    from lossguard.distributed.fsdp import reduce_step_stats

    for step in range(1, 13):
        ids = next(iter(sampler))
        if step == 6:
            torch.manual_seed(5000 + rank)
        x, y = data.batch(ids)
        _, loss = model(x, y)
        loss.backward()
        reduce_step_stats(loss, model.parameters())
        if step != 6:
            opt.step()
        opt.zero_grad(set_to_none=True)
    return [_local(p).detach().clone() for p in model.parameters()]


def _nan_then_reference(rank: int, world: int):
    """The NaN run and its reference in one launch (``build`` seeds each afresh): one process group."""
    return _nan_worker(rank, world, 6), _skip_worker(rank, world)


@pytest.mark.slow  # two runs in one 2-rank launch
def test_nan_on_one_rank_is_skipped_identically_on_both():
    (r0, ref0), (r1, ref1) = run_distributed(_nan_then_reference, world_size=2, timeout=180)
    assert r0["skipped"] == r1["skipped"] == [6]
    assert list(map(repr, r0["losses"])) == list(map(repr, r1["losses"]))  # NaN at 6 on both
    for got, want in zip((r0, r1), (ref0, ref1), strict=True):
        assert all(torch.equal(a, b) for a, b in zip(got["params"], want, strict=True))  # no NaN reached any shard
