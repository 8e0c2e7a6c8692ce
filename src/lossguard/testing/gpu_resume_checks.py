"""GPU self-check, exact resume: the pinned snapshot, a checkpoint, FSDP2 sharded saves over NCCL, and
NCCL's reduction of the step statistics (:mod:`lossguard.testing.gpu_check`)."""
from __future__ import annotations

from .gpu_common import Result, all_tensors, batch, gpt, mlp, train_gpt


def check_snapshot(device) -> Result:
    """HostSnapshot take, train on, restore: bitwise back."""
    import torch

    from ..checkpoint.snapshot import HostSnapshot
    from ..checkpoint.state import TrainState

    model = mlp(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    state = TrainState(model, opt)

    def train(n: int, start: int) -> None:
        for s in range(start, start + n):
            x, y = batch(s, device)
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            state.step += 1

    train(3, 0)
    snap = HostSnapshot(state, every=1)
    snap.take()
    saved = [t.clone() for t in all_tensors(model, opt)]
    train(3, 3)
    snap.restore()
    if device.type == "cuda":
        torch.cuda.synchronize()
    same = all(torch.equal(a, b) for a, b in zip(saved, all_tensors(model, opt), strict=True))
    return Result("snapshot_roundtrip", "PASS" if same else "FAIL",
                  f"{snap.nbytes / 2**10:.0f} KiB host copy, restored bitwise" if same else "restore differs")


def check_resume(device) -> Result:
    """Save, train on, restore, train the same steps again: bitwise the same (model, AdamW state,
    and the device RNG that dropout draws from)."""
    import tempfile

    import torch

    from ..checkpoint import CheckpointStore
    from ..checkpoint.state import TrainState

    model = gpt(device, dropout=0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    state = TrainState(model, opt)

    def train(n: int) -> None:
        train_gpt(model, opt, state, n, device)

    with tempfile.TemporaryDirectory() as tmp:
        store = CheckpointStore(tmp)
        train(3)
        state.save(store)
        train(4)
        straight = [t.clone() for t in all_tensors(model, opt)]
        state.restore(store, 3)
        train(4)
    same = all(torch.equal(a, b) for a, b in zip(straight, all_tensors(model, opt), strict=True))
    return Result("resume_bitwise", "PASS" if same else "FAIL",
                  "restored at step 3, 4 steps with dropout: bitwise the straight run" if same
                  else "the resumed steps differ from the straight run")


def _sharded_worker(rank: int, world: int, tmp: str, device_type: str):
    import torch
    from torch.distributed.fsdp import fully_shard

    from ..checkpoint import HostSnapshot, ShardedCheckpointStore, ShardedTrainState

    if device_type == "cuda":
        torch.cuda.set_device(rank)
    device = torch.device(f"cuda:{rank}") if device_type == "cuda" else torch.device(device_type)
    model = gpt(device)
    for block in model.h:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    state = ShardedTrainState(model, opt)

    def train(n: int) -> None:
        train_gpt(model, opt, state, n, device)

    def local() -> list:
        def own(v):  # this rank's shard of a DTensor, else the tensor
            return v.to_local() if hasattr(v, "to_local") else v

        out = [own(v).clone() for v in model.state_dict().values()]
        for st in opt.state.values():
            out += [own(v).clone() for _, v in sorted(st.items()) if torch.is_tensor(v)]
        return out

    store = ShardedCheckpointStore(tmp, keep_last=3, async_saves=True)
    train(3)
    state.save(store)                  # step 3, sync
    snap = HostSnapshot(state, every=3)
    snap.maybe_take(state.step)        # step 3, pinned host copy
    train(3)
    state.async_save(store).wait()     # step 6, async
    train(3)
    straight = local()
    results = []
    state.restore(store, 6)
    train(3)
    results.append(all(torch.equal(a, b) for a, b in zip(straight, local(), strict=True)))
    snap.restore()
    train(6)
    results.append(all(torch.equal(a, b) for a, b in zip(straight, local(), strict=True)))
    return results


def check_sharded(device) -> Result:
    """FSDP2 over NCCL (one rank per GPU, one GPU is enough; 2 gloo ranks on the CPU): a sync and an
    async sharded save, a verified load and a (pinned, on CUDA) host snapshot, each resumed bitwise."""
    import tempfile

    import torch

    from .distributed import run_distributed

    cuda = device.type == "cuda"
    world = min(2, torch.cuda.device_count()) if cuda else 2
    with tempfile.TemporaryDirectory() as tmp:
        per_rank = run_distributed(_sharded_worker, world_size=world, args=(tmp, device.type),
                                   backend="nccl" if cuda else "gloo", timeout=300)
    disk, memory = (all(r[i] for r in per_rank) for i in (0, 1))
    ok = disk and memory
    return Result("sharded_fsdp2", "PASS" if ok else "FAIL",
                  f"{world} rank(s) over {'NCCL' if cuda else 'gloo'}: from disk {'bitwise' if disk else 'DIFFERS'}, "
                  f"from the {'pinned ' if cuda else ''}host snapshot {'bitwise' if memory else 'DIFFERS'}")


def _nccl_worker(rank: int, world: int):
    import torch

    from ..distributed.fsdp import reduce_step_stats

    torch.cuda.set_device(rank)
    p = torch.nn.Parameter(torch.ones(8, device="cuda"))
    p.grad = torch.full((8,), float(rank + 1), device="cuda")
    s = reduce_step_stats(torch.tensor(float(rank), device="cuda"), [p])
    return float(s.loss), float(s.grad_norm), bool(s.any_nonfinite)


def check_nccl(device) -> Result:
    """reduce_step_stats over NCCL on 2 GPUs."""
    import torch

    if device.type != "cuda" or torch.cuda.device_count() < 2:
        return Result("nccl_two_ranks", "SKIP", "needs 2 CUDA devices")
    from .distributed import run_distributed

    r0, r1 = run_distributed(_nccl_worker, world_size=2, backend="nccl", timeout=300)
    ok = r0 == r1 and not r0[2]
    return Result("nccl_two_ranks", "PASS" if ok else "FAIL", f"rank 0 {r0}, rank 1 {r1}")
