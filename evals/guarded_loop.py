"""A small guarded training run with a bad-data pocket: the subject of the rollback-crash proofs.

The guard tests' regression MLP (:func:`evals.regression.regression_task`, dropout on so
the RNG matters) trained with AdamW and a cosine schedule under :class:`StabilityGuard` with a
:class:`CheckpointStore`; batches ``--pocket START:STOP`` of the data stream are corrupted (a
:class:`Fault` of kind ``bad_data``), so the guard skips, then rolls back in-process and skips the
pocket. It resumes through ``guard.restore()`` whenever the store holds a checkpoint. Run it as::

    python -m evals.guarded_loop --steps 90 --ckpt-dir ck --log run.jsonl --out final.pt

``--kill POINT`` SIGKILLs the process at one moment of its first rollback (a crash-test aid):

- ``booked``: the ledger is written (``resume_from``, skip range, budget), nothing else happened;
- ``superseding``: the first abandoned checkpoint has been removed, the others not yet;
- ``superseded``: every abandoned checkpoint is removed, the target is not loaded yet;
- ``restored``: the target is loaded, the rollback's bookkeeping not finished;
- ``after``: the rollback is complete; killed as the next batch is drawn.

``--no-guard`` trains the same loop without the guard (no pocket, the same RNG-neutral iteration):
the reference a guarded healthy run must equal bitwise. Output: ``--log`` gets ``{"step", "loss"}``
per step (appended; a resumed run re-logs the steps it replays; the last record of a step is the
live one), ``--out`` the final model, optimizer and scheduler state.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys

KILL_POINTS = ("booked", "superseding", "superseded", "restored", "after")


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _store_class(kill: str | None):
    from lossguard.checkpoint.store import CheckpointStore

    class KillingStore(CheckpointStore):
        """A CheckpointStore that dies at the chosen moment of the first rollback's removal."""

        removing = False

        def supersede_after(self, step):
            if kill == "booked":
                _die()
            self.removing = kill == "superseding"
            removed = super().supersede_after(step)
            if kill == "superseded":
                _die()
            return removed

        def _discard(self, path, kind):
            super()._discard(path, kind)
            if self.removing:
                _die()

    return KillingStore


def build(args):
    """Model, optimizer, scheduler, sampler, loader: the same in every process."""
    import torch

    from evals.regression import regression_task

    torch.manual_seed(0)
    model, sampler, loader = regression_task(args.n, batch_size=16, dropout=0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
    torch.manual_seed(1)  # the dropout stream
    return model, opt, sched, sampler, loader


def guard_config(args):
    """The guard's settings for this small run (checkpoints every ``--every`` steps)."""
    from lossguard.detect.outlier import OutlierConfig
    from lossguard.guard import GuardConfig
    from lossguard.recovery import RecoveryRecipe

    det = OutlierConfig(min_points=20)
    return GuardConfig(checkpoint_every=args.every, loss=det, grad_norm=det,
                       recipe=RecoveryRecipe(rollback_distance=args.every, skip_margin=10))


def run_guarded(args, out) -> None:
    import torch

    from lossguard.guard import StabilityGuard
    from lossguard.testing.faults import Fault, FaultInjector

    model, opt, sched, sampler, loader = build(args)
    store = _store_class(args.kill)(args.ckpt_dir, keep_last=10)
    guard = StabilityGuard(model, opt, store=store, sampler=sampler, scheduler=sched, config=guard_config(args),
                           log_path=args.guard_log, snapshots=args.snapshots)
    if args.kill == "restored":
        load = guard.state.restore

        def restore_then_die(st, step=None):
            load(st, step)
            _die()
        guard.state.restore = restore_then_die
    if store.steps():
        out.write({"event": "resume", "step": guard.restore()})
    pocket = [Fault(kind="bad_data", batches=tuple(args.pocket), factor=8.0)] if args.pocket else []
    inj = FaultInjector(pocket)
    for step, (x, y) in guard.batches(loader, steps=args.steps):
        if args.kill == "after" and guard.ledger.rollbacks:
            _die()
        x, y = inj.batch(step, guard.batch_index, (x, y))
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        guard.step(loss)
        out.write({"step": step + 1, "loss": loss.item()})
    guard.close()
    return model, opt, sched


def run_plain(args, out):
    import torch

    from lossguard.data.iterate import iter_rng_neutral

    model, opt, sched, _, loader = build(args)
    step = 0
    while step < args.steps:
        for x, y in iter_rng_neutral(loader):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            out.write({"step": step, "loss": loss.item()})
            if step == args.steps:
                break
    return model, opt, sched


class _Log:
    def __init__(self, path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if path else None

    def write(self, rec: dict) -> None:
        if self.fd is not None:
            os.write(self.fd, (json.dumps(rec) + "\n").encode())


def main(argv=None) -> int:
    """Command-line entry point; see the module docstring."""
    import torch

    p = argparse.ArgumentParser(prog="python -m evals.guarded_loop", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=90)
    p.add_argument("--n", type=int, default=2048, help="samples in the dataset")
    p.add_argument("--every", type=int, default=20, help="checkpoint every K steps (also the rollback distance)")
    p.add_argument("--ckpt-dir", default=None)
    p.add_argument("--log", default=None, help="per-step JSONL (appended)")
    p.add_argument("--guard-log", default=None, help="the guard's own event log")
    p.add_argument("--out", default=None, help="final model/optimizer/scheduler state (torch.save)")
    p.add_argument("--pocket", type=lambda s: [int(v) for v in s.split(":")], default=None,
                   help="START:STOP batch indices to corrupt")
    p.add_argument("--snapshots", type=int, default=0, help="host snapshots the guard keeps")
    p.add_argument("--kill", choices=KILL_POINTS, default=None)
    p.add_argument("--no-guard", action="store_true", help="the same loop without the guard")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    out = _Log(a.log)
    model, opt, sched = run_plain(a, out) if a.no_guard else run_guarded(a, out)
    if a.out:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                    "rng": torch.get_rng_state()}, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
