"""A live guard sees repeated data after its own resume (``recovery/resume_watch.py``), on a real model
that really memorises: a per-sample lookup model (a shared bias plus one learned offset per sample id,
each sample's offset moved halfway to its target the one time it is seen) trained with a guard and a
checkpoint store. The run stops after step 160 and a new process resumes from checkpoint 100:

- with the data loader restarted from the beginning (its position was not restored), the model meets
  samples it has memorised and its loss drops; the guard rolls back to the checkpoint it resumed from,
  16 losses after the resume, with the words the analyser's plan gives (``WholeLogFinding.answer``);
- with the data position restored, nothing happens."""
from __future__ import annotations

from dataclasses import replace

import pytest

from lossguard.recovery.finding import WholeLogFinding

torch = pytest.importorskip("torch")

N, B = 12000, 64  # sample ids, batch size (64: a flat loss a few % noisy in its trailing median)


def _targets():
    g = torch.Generator().manual_seed(0)
    return 1.0 + 0.5 * torch.randn(N, generator=g, dtype=torch.float64)


def _model():
    m = torch.nn.Module()
    m.bias = torch.nn.Parameter(torch.ones(1, dtype=torch.float64))
    m.offset = torch.nn.Embedding(N, 1, dtype=torch.float64)
    with torch.no_grad():  # small, not zero: the guard's first-steps sanity bound compares the grad
        m.offset.weight.copy_(0.01 * torch.randn(N, 1, generator=torch.Generator().manual_seed(1),
                                                 dtype=torch.float64))  # norm with the weights' norm
    # Per-sample lr B/4 on a batch mean of B squared errors: one update moves a sample's prediction
    # halfway to its target (memorised); the shared bias learns the mean slowly.
    opt = torch.optim.SGD([{"params": [m.bias], "lr": 0.05}, {"params": m.offset.parameters(), "lr": B / 4}])
    return m, opt


def _batches(first_batch: int):
    return [torch.arange(i * B, (i + 1) * B) for i in range(first_batch, N // B)]


def _train(guard, model, loader, steps, targets):
    for _, ids in guard.batches(loader, steps=steps):
        pred = model.bias + model.offset(ids).squeeze(1)
        loss = torch.mean((pred - targets[ids]) ** 2)
        loss.backward()
        guard.step(loss)
        heavy = [e for e in guard.events if e["event"] in ("rollback", "lr_cut", "halt")]
        if heavy:
            return heavy[0]
    return None


@pytest.mark.parametrize("position_restored", [False, True])
def test_the_guard_rolls_back_when_its_resume_replays_memorised_data(tmp_path, position_restored):
    from lossguard.checkpoint import CheckpointStore
    from lossguard.guard import StabilityGuard
    from lossguard.guard.config import GuardConfig

    targets = _targets()
    cfg = replace(GuardConfig(), checkpoint_every=100, halt_raises=False, log_metrics=False)
    model, opt = _model()
    guard = StabilityGuard(model, opt, store=CheckpointStore(tmp_path), config=cfg)
    assert _train(guard, model, _batches(0), 160, targets) is None  # a healthy first launch
    guard.close()

    model, opt = _model()  # a new process
    guard = StabilityGuard(model, opt, store=CheckpointStore(tmp_path), config=cfg)
    assert guard.restore(100) == 100
    loader = _batches(100 if position_restored else 0)  # the bug: the loader starts over
    heavy = _train(guard, model, loader, 140, targets)
    if position_restored:
        assert heavy is None
        return
    assert heavy is not None and heavy["event"] == "rollback" and heavy["cause"] == "repeated_data"
    assert heavy["step"] == 115 and heavy["to_step"] == 100  # 16 losses after the resume, back to it
    answer = WholeLogFinding(kind="repeated_data", step=115, onset=100, live=True).answer(margin=0)
    assert answer is not None
    nums, words = answer
    assert heavy["reasons"] == words and heavy["suspect"] == nums["suspect"]
