"""The README's "Guard a live run" loop, as written, made runnable -- and checked by verify-resume.

``DataLoader(dataset, batch_sampler=ResumableSampler(...))``, ``StabilityGuard(...)``,
``guard.batches(loader, steps=...)``, ``loss.backward()``, ``guard.step(loss)``; plus the resume
line the README shows (``guard.restore()`` when the store holds a checkpoint). A small MLP with
dropout (so a shifted RNG would show) learns teacher-labelled Gaussian data with AdamW and a
warm-up LambdaLR.

It follows the ``lossguard verify-resume`` protocol (``docs/resume.md``): one JSON line per step
``{"step", "loss", "batch_ids"}`` to ``$LOSSGUARD_LOG``, checkpoints in ``$LOSSGUARD_CKPT_DIR``,
save and exit after step ``$LOSSGUARD_STOP_AT``. CI runs (``tests/test_readme_loop_resume.py``)::

    lossguard verify-resume -- python examples/readme_loop.py --steps 40
"""
from __future__ import annotations

import argparse
import json
import os

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

from lossguard import CheckpointStore, GuardConfig, ResumableSampler, StabilityGuard


class Teacher(torch.utils.data.Dataset):
    """Gaussian vectors labelled by a fixed random linear teacher; ``[i] -> (i, x, y)``."""

    def __init__(self, n: int = 1024, dim: int = 16, classes: int = 4) -> None:
        g = torch.Generator().manual_seed(1234)
        self.x = torch.randn(n, dim, generator=g)
        self.y = (self.x @ torch.randn(dim, classes, generator=g)).argmax(1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        return i, self.x[i], self.y[i]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--checkpoint-every", type=int, default=10)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    ckpt = os.environ.get("LOSSGUARD_CKPT_DIR", "ckpt")
    stop_at = int(os.environ["LOSSGUARD_STOP_AT"]) if os.environ.get("LOSSGUARD_STOP_AT") else None
    out = open(os.environ.get("LOSSGUARD_LOG", "steps.jsonl"), "a", encoding="utf-8")

    dataset = Teacher()
    model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Dropout(0.1), nn.Linear(64, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 10))

    # --- the README's loop -------------------------------------------------------------------
    sampler = ResumableSampler(len(dataset), batch_size=32, seed=0)
    loader = DataLoader(dataset, batch_sampler=sampler)
    store = CheckpointStore(ckpt)
    guard = StabilityGuard(model, optimizer, scheduler=scheduler, sampler=sampler, store=store,
                           log_path=os.path.join(ckpt, "run.jsonl"),
                           config=GuardConfig(checkpoint_every=a.checkpoint_every))
    if store.steps():
        guard.restore()   # resume: model, optimizer, scheduler, RNG, data position, guard state
    for step, (ids, x, y) in guard.batches(loader, steps=a.steps):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        guard.step(loss)  # instead of optimizer.step(); scheduler.step(); zero_grad()
        # ------------------------------------------------------------------------------------
        out.write(json.dumps({"step": guard.step_count, "loss": loss.item(), "batch_ids": ids.tolist()}) + "\n")
        out.flush()
        if stop_at is not None and guard.step_count == stop_at:
            guard.save()
            break
    guard.close()
    out.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
