"""Exact resume: N steps straight == k steps, save, a FRESH PROCESS, N-k steps — bitwise-equal
losses and parameters, with shuffling, dropout, AdamW, a cosine schedule and 2 DataLoader workers."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from lossguard.checkpoint.state import TrainState  # noqa: E402
from lossguard.checkpoint.store import CheckpointStore  # noqa: E402
from evals.train_loop import build  # noqa: E402

STEPS, K = 40, 17  # 32 batches per epoch: the resumed part crosses an epoch boundary


def _run(*args: str) -> None:
    cmd = [sys.executable, "-m", "evals.train_loop", "--steps", str(STEPS), "--save-every", "10",
           "--workers", "2", "--dropout", "0.2", *args]
    subprocess.run(cmd, check=True, timeout=120)


def curve(path) -> dict[int, tuple[float, list[int]]]:
    """step -> (loss, batch_ids), the last record of each step winning (a resume re-logs steps)."""
    out = {}
    for line in open(path):
        rec = json.loads(line)
        if "loss" in rec:
            out[rec["step"]] = (rec["loss"], rec["batch_ids"])
    return out


def assert_same_tensors(a, b, where="state"):
    """Recursively torch.equal every tensor and == everything else."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same_tensors(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_tensors(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


@pytest.mark.slow  # three fresh interpreters with 2 workers each: ~15 s idle, more on a loaded machine
def test_resume_in_fresh_process_is_bitwise_exact(tmp_path):
    _run("--ckpt-dir", str(tmp_path / "a"), "--log", str(tmp_path / "a.jsonl"))
    _run("--ckpt-dir", str(tmp_path / "b"), "--log", str(tmp_path / "b.jsonl"), "--stop-at", str(K))
    assert max(curve(tmp_path / "b.jsonl")) == K
    _run("--ckpt-dir", str(tmp_path / "b"), "--log", str(tmp_path / "b.jsonl"))
    a, b = curve(tmp_path / "a.jsonl"), curve(tmp_path / "b.jsonl")
    assert sorted(a) == list(range(1, STEPS + 1))
    assert a == b  # every loss bitwise (JSON floats round-trip exactly) and every batch's sample ids
    events = [json.loads(line) for line in open(tmp_path / "b.jsonl") if '"event"' in line]
    assert events == [{"step": K, "event": "resume"}]
    final_a = CheckpointStore(tmp_path / "a").load(STEPS)
    final_b = CheckpointStore(tmp_path / "b").load(STEPS)
    for part in ("model", "optimizer", "scheduler", "data", "step"):
        assert_same_tensors(final_a[part], final_b[part], part)
    # the RNG streams ended in the same place too (dropout drew the same numbers)
    assert torch.equal(final_a["rng"]["torch"], final_b["rng"]["torch"])


def _steps(run, scaler, n):
    """n steps of fp32 training with a GradScaler (CPU), returning the losses."""
    losses = []
    it = iter(run.sampler)
    for _ in range(n):
        ids = next(it, None)
        if ids is None:
            it = iter(run.sampler)
            ids = next(it)
        _, x, y = torch.utils.data.default_collate([run.dataset[i] for i in ids])
        run.optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(run.model(x), y)
        scaler.scale(loss).backward()
        scaler.step(run.optimizer)
        scaler.update()
        run.scheduler.step()
        run.state.step += 1
        losses.append(loss.item())
    return losses


def test_restore_in_same_process_replays_exactly(tmp_path):
    """A rollback inside one process: restore step 10 and the next 15 steps repeat bitwise."""
    torch.set_num_threads(1)
    run = build(seed=3, steps=60, dropout=0.3, n=96)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=4)
    state = run.state = TrainState(run.model, run.optimizer, scheduler=run.scheduler, scaler=scaler,
                                   data=run.sampler)
    store = CheckpointStore(tmp_path)
    _steps(run, scaler, 10)
    state.save(store)
    first = _steps(run, scaler, 15)  # crosses epoch boundaries (6 batches/epoch) and scale growths
    after_first = {k: v.clone() for k, v in run.model.state_dict().items()}
    scale_first = scaler.get_scale()
    assert state.restore(store) == 10 and run.sampler.position == 10
    second = _steps(run, scaler, 15)
    assert first == second and scaler.get_scale() == scale_first
    assert_same_tensors(after_first, run.model.state_dict(), "model")
