"""The guarded training run over :mod:`.planted` data: names its bad samples, keeps them out.

One function, :func:`train`, for one process or one rank of a gloo group (call it inside
``torch.distributed`` and it shards the data and wraps the model in DDP); and a command line for the
SIGKILL proof::

    python -m evals.planted_loop --steps 330 --ckpt-dir ck --trace t.jsonl [--kill-at 170]

It resumes from the newest checkpoint in ``--ckpt-dir`` when there is one. The run's skip list is
``<ckpt-dir>/skiplist.json`` (rank 0's directory); ``--skiplist FILE`` seeds it on a fresh start (a
list written by another run, e.g. one with another world size). ``--trace`` gets one JSONL record
per step on rank 0: ``{"step", "loss", "ids": [every rank's delivered sample ids]}``.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

from evals.planted import Poison, PlantedBags, bag_classifier, batch_loss, describe, pad_collate, per_row_loss, plant

N_SAMPLES, GLOBAL_BATCH, SEED = 120_000, 32, 1
PLACEMENTS = [(120, 5, Poison.RANDOM_BYTES), (160, 0, Poison.REPEATED_TOKEN), (200, 17, Poison.FLIPPED_LABEL),
              (240, 3, Poison.FLIPPED_LABEL), (240, 30, Poison.RANDOM_BYTES), (280, 9, Poison.REPEATED_TOKEN),
              (300, 2, Poison.FLIPPED_LABEL), (303, 8, Poison.RANDOM_BYTES), (306, 11, Poison.REPEATED_TOKEN),
              (309, 20, Poison.RANDOM_BYTES)]
"""``(batch position, row of the global batch, kind)``: ten planted samples met between steps 120
and 309; the last three, six steps apart, make an episode that rolls back."""


def planted_ids() -> dict[int, Poison]:
    """The planted sample ids (the order is fixed by the sampler's seed, not the world size)."""
    from lossguard.data.sampler import ResumableSampler

    return plant(ResumableSampler(N_SAMPLES, batch_size=GLOBAL_BATCH, seed=SEED), PLACEMENTS)


def train(*, steps: int, ckpt_dir: str | os.PathLike, trace: str | os.PathLike | None = None, attribution: bool = True,
          seed_skiplist: str | os.PathLike | None = None, dropout: float = 0.1, kill_at: int | None = None,
          checkpoint_every: int = 25, log_path: str | os.PathLike | None = None) -> dict:
    """Train (or resume) the planted run; returns ``{"losses": {step: loss}, "spikes": [(step,
    batch_index, global ids)], "suspects": [records], "skiplist": [ids], "rollbacks": n}`` of this
    process (the loss is the global one on every rank; ``spikes`` are the withheld steps)."""
    import torch
    import torch.distributed as dist

    from lossguard.checkpoint.store import CheckpointStore
    from lossguard.data.sampler import ResumableSampler
    from lossguard.data.skiplist import SKIPLIST_FILE, SkipList
    from lossguard.guard.config import GuardConfig
    from lossguard.guard.guard import StabilityGuard
    from lossguard.guard.sample_namer import SampleAttribution

    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    rank = dist.get_rank() if world > 1 else 0
    ckpt = Path(ckpt_dir)
    store = CheckpointStore(ckpt / f"rank{rank}" if world > 1 else ckpt, keep_last=3, min_keep_steps_back=150)
    skiplist = SkipList.open(Path(store.directory) / SKIPLIST_FILE)
    fresh = not store.steps()
    if fresh and seed_skiplist is not None:
        skiplist.add(SkipList.load(seed_skiplist).keys(), reason=f"from {seed_skiplist}")
    sampler = ResumableSampler(N_SAMPLES, batch_size=GLOBAL_BATCH // world, seed=SEED, num_replicas=world, rank=rank,
                               skiplist=skiplist)
    data = PlantedBags(N_SAMPLES, seed=0, planted=planted_ids())
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, collate_fn=pad_collate)
    model = bag_classifier(dropout=dropout)
    wrapped = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    names = SampleAttribution(per_sample_loss=per_row_loss, skiplist=skiplist,
                              render=lambda key: describe(data, key.index)) if attribution else None
    guard = StabilityGuard(wrapped, opt, store=store, sampler=sampler, attribution=names,
                           config=GuardConfig(checkpoint_every=checkpoint_every, loss_rise=None), log_path=log_path)
    if not fresh:
        guard.restore()
    out = None if trace is None or rank else open(trace, "a", encoding="utf-8")
    losses: dict[int, float] = {}
    spikes: list[tuple[int, int, list[int]]] = []
    try:
        for step, batch in guard.batches(loader, steps=steps):
            loss = batch_loss(wrapped, batch)
            loss.backward()
            guard.step(loss)
            losses[step] = guard.last_record.loss
            ids = batch[0].tolist()
            if world > 1:
                every = [None] * world
                dist.all_gather_object(every, ids)
                ids = [i for part in every for i in part]
            if guard.last_record.bad:
                spikes.append((step, guard.batch_index, ids))
            if out is not None:
                out.write(json.dumps({"step": step, "loss": losses[step], "ids": ids}) + "\n")
                out.flush()
            if kill_at is not None and step == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)  # a real, unclean death (no finally, no flush)
    finally:
        guard.close()
        if out is not None:
            out.close()
    return {"losses": losses, "spikes": spikes, "suspects": [] if guard.namer is None else guard.namer.records,
            "skiplist": [k.to_json() for k in skiplist.keys()], "rollbacks": guard.ledger.rollbacks}


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m evals.planted_loop")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--trace")
    p.add_argument("--skiplist", help="seed the run's skip list from this file on a fresh start")
    p.add_argument("--no-attribution", action="store_true")
    p.add_argument("--kill-at", type=int, help="SIGKILL this process right after this step")
    p.add_argument("--log", help="the guard's JSONL log (decisions, named samples, metrics)")
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    train(steps=a.steps, ckpt_dir=a.ckpt_dir, trace=a.trace, attribution=not a.no_attribution,
          seed_skiplist=a.skiplist, kill_at=a.kill_at, log_path=a.log)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
