"""A small, real, deterministic training run: the subject of the resume and crash proofs.

An MLP with dropout learns a synthetic regression task with AdamW (weight decay) and a cosine LR
schedule, reading a shuffled map-style dataset through :class:`ResumableLoader` (optionally with
worker processes), checkpointing a :class:`TrainState` into a :class:`CheckpointStore`. One thread;
about 20 ms a step (measured on a busy 2-core machine, no workers). Run it as::

    python -m evals.train_loop --steps 60 --ckpt-dir ck --save-every 10 --log run.jsonl

It resumes from the newest valid checkpoint in ``--ckpt-dir`` whenever there is one, and follows
the ``lossguard verify-resume`` protocol (``docs/resume.md``): ``LOSSGUARD_LOG``,
``LOSSGUARD_CKPT_DIR`` and ``LOSSGUARD_STOP_AT`` are the defaults of ``--log``, ``--ckpt-dir`` and
``--stop-at``. The log gets one JSONL record per step, ``{"step", "loss", "lr", "batch_ids"}``, and a
``{"step": k, "event": "resume"}`` record when it resumes from the checkpoint of step k (k = 0 when it
starts over in a log that already has records, because it was killed before its first checkpoint).

``--broken-resume`` is a deliberately wrong variant (it restarts its data stream on resume, as a
loop that forgets to checkpoint its sampler does), used to prove verify-resume catches it.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lossguard.checkpoint.files import Checksum
from lossguard.checkpoint.state import TrainState
from lossguard.checkpoint.store import CheckpointStore
from lossguard.data.loader import ResumableLoader
from lossguard.data.sampler import ResumableSampler


class SyntheticRegression:
    """``y = tanh(x @ w) + noise``, with every sample (and its noise) a function of (seed, index).

    ``dataset[i]`` returns ``(i, x, y)``: the batch carries its own sample ids.
    """

    def __init__(self, n: int = 512, dim: int = 16, seed: int = 0) -> None:
        import torch

        rng = np.random.default_rng(seed)
        self.x = torch.from_numpy(rng.standard_normal((n, dim)).astype(np.float32))
        w = (rng.standard_normal((dim, 1)) / np.sqrt(dim)).astype(np.float32)
        self.y = torch.tanh(self.x @ torch.from_numpy(w))
        self.seed = seed

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        import torch

        # Per-sample "augmentation" noise from (seed, index), never from a worker's global RNG.
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + int(i))
        return int(i), self.x[i] + 0.01 * torch.randn(self.x.shape[1], generator=g), self.y[i]


@dataclass
class Run:
    """The parts of one training run, built deterministically from ``seed``."""

    model: object
    optimizer: object
    scheduler: object
    sampler: ResumableSampler
    dataset: SyntheticRegression
    state: TrainState


def build(*, seed: int = 0, steps: int = 100, dropout: float = 0.1, n: int = 512, batch_size: int = 16) -> Run:
    """Build model, AdamW, cosine schedule, dataset, sampler and the TrainState tying them together."""
    import torch

    torch.manual_seed(seed)
    dataset = SyntheticRegression(n, 16, seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Dropout(dropout),
                                torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Dropout(dropout),
                                torch.nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(steps, 1))
    sampler = ResumableSampler(len(dataset), batch_size=batch_size, seed=seed)
    return Run(model, optimizer, scheduler, sampler, dataset,
               TrainState(model, optimizer, scheduler=scheduler, data=sampler))


class _SlowStore(CheckpointStore):
    """Writes the payload in 16 chunks spread over ``delay`` seconds: a window to kill it in."""

    def __init__(self, *args, delay: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.delay = delay

    def _write_payload(self, path, state):
        import torch

        buf = io.BytesIO()
        torch.save(state, buf)
        data = buf.getvalue()
        chunk = -(-len(data) // 16)
        with open(path, "wb") as fh:
            for k in range(0, len(data), chunk):
                fh.write(data[k:k + chunk])
                fh.flush()
                time.sleep(self.delay / 16)
            os.fsync(fh.fileno())
        crc = Checksum()
        crc.update(data)
        return len(data), crc.hexdigest()


class _Log:
    """Append-only JSONL; one ``os.write`` per record, and a torn last line (kill mid-write) repaired."""

    def __init__(self, path: str | None) -> None:
        self.fd, self.had_records = None, False
        if path:
            p = Path(path)
            if p.exists():
                data = p.read_bytes()
                if data and not data.endswith(b"\n"):
                    with open(p, "r+b") as fh:
                        fh.truncate(data.rfind(b"\n") + 1)
                self.had_records = b"\n" in data
            self.fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, record: dict) -> None:
        if self.fd is not None:
            os.write(self.fd, (json.dumps(record) + "\n").encode())


def train(*, steps: int, ckpt_dir: str | None, save_every: int, log: str | None, seed: int = 0,
          workers: int = 0, dropout: float = 0.1, kill_at: int | None = None, stop_at: int | None = None,
          save_delay: float = 0.0, broken_resume: bool = False, progress: bool = False) -> Run:
    """Train to ``steps`` (resuming from ``ckpt_dir`` when it holds a checkpoint); returns the run.

    Checkpoints after every ``save_every`` steps, at ``stop_at`` (then returns) and at the end.
    ``kill_at`` SIGKILLs the process itself right after logging that step (a crash test aid).
    """
    import torch

    torch.set_num_threads(1)
    run = build(seed=seed, steps=steps, dropout=dropout)
    store = None
    if ckpt_dir:
        store = (_SlowStore(ckpt_dir, keep_last=3, delay=save_delay) if save_delay > 0
                 else CheckpointStore(ckpt_dir, keep_last=3))
    out = _Log(log)
    say = (lambda text: print(text, flush=True)) if progress else (lambda text: None)
    if store is not None and store.steps():
        sd = store.load()
        if broken_resume:  # the bug on purpose: the data position is not restored
            sd = dict(sd, data=run.sampler.state_dict())
        run.state.load_state_dict(sd)
        out.write({"step": run.state.step, "event": "resume"})
        say(f"RESUME {run.state.step}")
    elif out.had_records:  # killed before its first checkpoint: starting over is a resume from 0
        out.write({"step": 0, "event": "resume", "note": "no checkpoint yet; restarted from scratch"})
    loader = ResumableLoader(run.dataset, run.sampler, num_workers=workers)
    batches = loader.batches()

    def save() -> None:
        say(f"SAVE_BEGIN {run.state.step}")
        run.state.save(store)
        say(f"SAVE_END {run.state.step}")

    run.model.train()
    while run.state.step < steps:
        ids, x, y = next(batches)
        run.optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(run.model(x), y)
        loss.backward()
        run.optimizer.step()
        lr = run.scheduler.get_last_lr()[0]
        run.scheduler.step()
        run.state.step += 1
        out.write({"step": run.state.step, "loss": loss.item(), "lr": lr, "batch_ids": ids.tolist()})
        say(f"STEP {run.state.step}")
        if kill_at is not None and run.state.step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        step = run.state.step
        if store is not None and (step % save_every == 0 or step == steps or step == stop_at):
            save()
        if stop_at is not None and step >= stop_at:
            break
    return run


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else None


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; see the module docstring."""
    p = argparse.ArgumentParser(prog="python -m evals.train_loop", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100, help="total optimizer steps")
    p.add_argument("--ckpt-dir", default=os.environ.get("LOSSGUARD_CKPT_DIR"), help="checkpoint directory")
    p.add_argument("--save-every", type=int, default=10, help="checkpoint every K steps")
    p.add_argument("--log", default=os.environ.get("LOSSGUARD_LOG"), help="JSONL log (appended)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--kill-at", type=int, default=None, help="SIGKILL itself after logging this step")
    p.add_argument("--stop-at", type=int, default=_env_int("LOSSGUARD_STOP_AT"),
                   help="save and exit cleanly after this step")
    p.add_argument("--save-delay", type=float, default=0.0, help="spread each checkpoint write over S seconds")
    p.add_argument("--broken-resume", action="store_true", help="restart the data stream on resume (a bug)")
    p.add_argument("--progress", action="store_true", help="print STEP/SAVE_BEGIN/SAVE_END lines")
    a = p.parse_args(argv)
    train(steps=a.steps, ckpt_dir=a.ckpt_dir, save_every=a.save_every, log=a.log, seed=a.seed,
          workers=a.workers, dropout=a.dropout, kill_at=a.kill_at, stop_at=a.stop_at,
          save_delay=a.save_delay, broken_resume=a.broken_resume, progress=a.progress)
    return 0


if __name__ == "__main__":
    sys.exit(main())
