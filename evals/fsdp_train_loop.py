"""A real FSDP2 training run on CPU ranks: the subject of the sharded-checkpoint and restart proofs.

A tiny byte-level GPT (:mod:`lossguard.demo.model`, dropout on, so every rank's RNG matters)
is ``fully_shard``-ed per block and at the root over a 1-D CPU mesh, trained with AdamW and a cosine
schedule on windows of the demo corpus read through a :class:`ResumableSampler` (each rank its
slice of a global batch). Every step: one all-reduce of the packed step statistics
(:func:`lossguard.distributed.fsdp.reduce_step_stats`), a skip when any rank saw a non-finite value,
a :class:`ShardedCheckpointStore` save every ``--save-every`` steps (sync and async alternating with
``--async-saves``), and resume from the newest valid checkpoint whenever the directory has one.
Run it under torchrun::

    torchrun --nproc-per-node 2 --max-restarts 3 -m evals.fsdp_train_loop \\
        --steps 40 --ckpt-dir ck --jsonl run.jsonl --out final

Output: rank 0 appends ``{"step", "loss", "attempt"}`` to ``--jsonl`` per step; with ``--progress``
every rank prints ``START <rank> <pid> <attempt>``, ``STEP <rank> <step>`` and
``SAVE <rank> <step> <sync|async>`` lines (flushed) for a test to time its kills by; at the end each
rank saves its local shards of model and optimizer to ``<out>-rank<r>.pt``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import resources
import time


def _args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--ckpt-dir", required=True)
    ap.add_argument("--jsonl", required=True)
    ap.add_argument("--out", default=None, help="prefix of the final local-shard files")
    ap.add_argument("--save-every", type=int, default=5)
    ap.add_argument("--async-saves", action="store_true", help="every other save through async_save")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--nan-at", type=int, default=None, help="rank 1's loss is NaN at this step")
    ap.add_argument("--hang-at", type=int, default=None, help="on attempt 0, rank 1 hangs at this step")
    ap.add_argument("--heartbeat", type=float, default=None, help="heartbeat timeout in seconds")
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    return ap.parse_args(argv)


class CorpusWindows:
    """Sample ``i``: a window of ``block + 1`` bytes of the demo corpus at a position fixed by ``i``."""

    def __init__(self, block: int) -> None:
        import torch

        data = resources.files("lossguard.demo").joinpath("corpus.txt").read_bytes()  # the demo's shipped corpus
        self.data = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
        self.block = block
        self.n = 4096

    def __len__(self) -> int:
        return self.n

    def batch(self, ids: list[int]):
        import torch

        span = len(self.data) - self.block - 1
        starts = [(i * 7919) % span for i in ids]
        rows = torch.stack([self.data[s:s + self.block + 1] for s in starts])
        return rows[:, :-1], rows[:, 1:]


def build(args, rank: int, world: int):
    """Model (fully_shard'ed), optimizer, scheduler, sampler, dataset -- the same on every attempt."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from lossguard.data.sampler import ResumableSampler
    from lossguard.demo.model import GPTConfig, TinyGPT

    torch.manual_seed(0)  # identical initial weights on every rank, before sharding
    cfg = GPTConfig(n_layer=args.layers, n_head=2, n_embd=args.width, block_size=16, dropout=0.1)
    model = TinyGPT(cfg)
    if world > 1:
        mesh = init_device_mesh("cpu", (world,))
        for block in model.h:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(args.steps, 1))
    data = CorpusWindows(cfg.block_size)
    sampler = ResumableSampler(len(data), batch_size=4, seed=0, num_replicas=world, rank=rank)
    torch.manual_seed(1000 + rank)  # per-rank dropout streams
    return model, opt, sched, sampler, data


def main(argv=None) -> int:
    import torch

    from lossguard.checkpoint import ShardedCheckpointStore, ShardedTrainState
    from lossguard.distributed.fsdp import reduce_step_stats
    from lossguard.distributed.heartbeat import Heartbeat, HeartbeatConfig
    from lossguard.distributed.restart import init_distributed

    args = _args(argv)
    torch.set_num_threads(1)
    ctx = init_distributed("gloo", timeout_s=60)
    rank, world = ctx.rank, ctx.world_size
    def say(*words) -> None:
        if args.progress:  # one write per line: lines of the two ranks never interleave
            sys.stdout.write(" ".join(map(str, words)) + "\n")
            sys.stdout.flush()

    say("START", rank, os.getpid(), ctx.restart)
    model, opt, sched, sampler, data = build(args, rank, world)
    store = ShardedCheckpointStore(args.ckpt_dir, keep_last=2, async_saves=args.async_saves)
    state = ShardedTrainState(model, opt, scheduler=sched, data=sampler)
    if store.agreed_steps():
        state.restore(store)
    log = open(args.jsonl, "a") if rank == 0 else None
    heartbeat = Heartbeat(HeartbeatConfig(timeout_s=args.heartbeat, check_every_s=0.25), rank=rank) \
        if args.heartbeat else None
    if heartbeat:
        heartbeat.start()
    saves = state.step // args.save_every
    while state.step < args.steps:
        step = state.step + 1
        if args.hang_at == step and rank == 1 and ctx.restart == 0:
            time.sleep(3600)  # a stuck rank: only the heartbeat ends this attempt
        ids = next(iter(sampler))
        x, y = data.batch(ids)
        _, loss = model(x, y)
        if args.nan_at == step and rank == 1:
            loss = loss * float("nan")
        loss.backward()
        stats = reduce_step_stats(loss, model.parameters())
        skip = bool(stats.any_nonfinite)  # the step's one host read
        if not skip:
            opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        state.step = step
        if log:
            log.write(json.dumps({"step": step, "loss": float(stats.loss), "skipped": skip,
                                  "attempt": ctx.restart}) + "\n")
            log.flush()
        say("STEP", rank, step)
        if heartbeat:
            heartbeat.beat()
        if step % args.save_every == 0:
            saves += 1
            asynchronous = args.async_saves and saves % 2 == 0
            say("SAVE", rank, step, "async" if asynchronous else "sync")
            (state.async_save if asynchronous else state.save)(store)
    store.wait()
    if heartbeat:
        heartbeat.stop()
    if args.out:
        from lossguard.checkpoint.snapshot import _local

        shards = {"model": {k: _local(v).clone() for k, v in model.state_dict().items()},
                  "optim": [{k: _local(v).clone() if torch.is_tensor(v) else v for k, v in st.items()}
                            for st in opt.state.values()]}
        torch.save(shards, f"{args.out}-rank{rank}.pt")
    if log:
        log.close()
    end_job()
    return 0


def end_job() -> None:
    """Every rank done (a barrier), then the process group destroyed: the job's own ending, so no
    rank exits while another still talks to it (both FSDP eval loops end this way)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
