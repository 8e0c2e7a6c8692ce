"""A guarded FSDP2 run under ``torchrun``: a bad-data pocket, an in-process rollback, and a SIGKILL.

The loop a user writes from the docs (:class:`StabilityGuard` over a :class:`ShardedCheckpointStore`,
``guard.batches`` / ``guard.step``), on the model, optimizer and data of
:mod:`evals.fsdp_train_loop`. The batches ``[pocket_start, pocket_stop)`` are bad on every rank
(loss scaled by 8): the guard withholds them, rolls back in the process to an earlier checkpoint and
skips them. With ``--kill`` one rank SIGKILLs itself on the first attempt at a moment of that
rollback, and ``torchrun --max-restarts`` starts the job again; the relaunch resumes through
``guard.restore()``. Run::

    torchrun --standalone --nproc-per-node 2 --max-restarts 1 -m evals.fsdp_guarded_loop \\
        --ckpt-dir ck --out final --kill after:0

Kill moments (``--kill``): ``booked`` -- inside the rollback, after the ledger booked it and before
the newer checkpoints are removed; ``after:N`` -- N batches after the rollback, before the next save
(the window where an abandoned newer checkpoint used to be restored). At the end each rank writes
``<out>-rank<r>.pt``: its local shards, optimizer state, RNG state, the guard's rollbacks and the
ledger's skip ranges, for a test to compare bitwise against the run without a kill.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from types import SimpleNamespace


def _args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--ckpt-dir", required=True)
    ap.add_argument("--out", required=True, help="prefix of the per-rank result files")
    ap.add_argument("--pocket", type=int, nargs=2, default=(49, 55), metavar=("START", "STOP"),
                    help="half-open range of batch indices whose loss is scaled by 8 on every rank")
    ap.add_argument("--kill", default=None, help="'booked' or 'after:N' (first attempt only)")
    ap.add_argument("--kill-rank", type=int, default=1)
    return ap.parse_args(argv)


def local_tensor(t):
    """The rank's own shard of a DTensor, or the tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv=None) -> int:
    import torch

    from evals.fsdp_train_loop import build, end_job
    from lossguard.checkpoint import ShardedCheckpointStore
    from lossguard.detect.outlier import OutlierConfig
    from lossguard.distributed.restart import init_distributed
    from lossguard.guard import GuardConfig, StabilityGuard
    from lossguard.recovery import RecoveryRecipe

    args = _args(argv)
    torch.set_num_threads(1)
    ctx = init_distributed("gloo", timeout_s=60)
    killer = args.kill is not None and ctx.restart == 0 and ctx.rank == args.kill_rank
    moment, _, after = (args.kill or "").partition(":")

    class Store(ShardedCheckpointStore):
        """The store, with a kill point between booking a rollback and removing newer checkpoints."""

        def supersede_after(self, step: int) -> list[int]:
            if killer and moment == "booked":
                _die()
            return super().supersede_after(step)

    model, opt, sched, sampler, data = build(SimpleNamespace(layers=1, width=32, steps=args.steps),
                                             ctx.rank, ctx.world_size)
    det = OutlierConfig(min_points=20)
    cfg = GuardConfig(checkpoint_every=10, loss=det, grad_norm=det,
                      recipe=RecoveryRecipe(rollback_distance=10, skip_margin=10))
    store = Store(args.ckpt_dir, keep_last=10)
    guard = StabilityGuard(model, opt, store=store, sampler=sampler, scheduler=sched, config=cfg)
    if store.agreed_steps():
        guard.restore()
    since_rollback = None
    for _step, ids in guard.batches(sampler, steps=args.steps):
        if guard.ledger.rollbacks and since_rollback is None:
            since_rollback = 0
        if killer and moment == "after" and since_rollback == int(after):
            _die()
        if since_rollback is not None:
            since_rollback += 1
        _, loss = model(*data.batch(ids))
        if args.pocket[0] <= guard.batch_index < args.pocket[1]:
            loss = loss * 8.0  # a bad-data pocket on every rank's slice
        loss.backward()
        guard.step(loss)
    guard.close()
    result = {"shards": [local_tensor(p).detach().clone() for p in model.parameters()],
              "optim": [{k: local_tensor(v).clone() if torch.is_tensor(v) else v for k, v in st.items()}
                        for st in opt.state.values()],
              "rng": torch.get_rng_state(), "attempt": ctx.restart,
              "rollbacks": [(e["step"], e["to_step"]) for e in guard.events if e["event"] == "rollback"],
              "skip_ranges": guard.ledger.to_dict()["skip_ranges"]}
    torch.save(result, f"{args.out}-rank{ctx.rank}.pt")
    end_job()
    return 0


if __name__ == "__main__":
    sys.exit(main())
