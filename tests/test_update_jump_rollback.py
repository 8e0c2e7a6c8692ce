"""An LR jump on a real tiny model (issue 20): the update-size evidence rolls the run back to the
checkpoint before the jump and brings the LR back, so the jumped updates are undone and the run goes
on as the clean one does; the cut alone (no rollback) keeps the jumped step's damage."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from lossguard.checkpoint.store import CheckpointStore  # noqa: E402
from lossguard.data.sampler import ResumableSampler  # noqa: E402
from lossguard.demo.model import GPTConfig, TinyGPT  # noqa: E402
from lossguard.guard import GuardConfig, StabilityGuard  # noqa: E402
from lossguard.guard.update_size import LR_CUT_CAUSE, UpdateSizeConfig, UpdateSizeTest  # noqa: E402

STEPS, JUMP_AT, JUMP, EVERY = 90, 63, 20.0, 25  # the jump lies between checkpoints (50 and 75)


@pytest.fixture(autouse=True)
def _one_thread():
    """One torch thread: a model this small only pays for thread hand-offs on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _train(tmp_path, name: str, jump: float, rollback: bool = True, deferred: bool = False):
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: jump if s >= JUMP_AT else 1.0)
    data = torch.randint(0, 256, (512, 9), generator=torch.Generator().manual_seed(0))
    sampler = ResumableSampler(len(data), batch_size=8, seed=0)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data), batch_sampler=sampler)
    log = tmp_path / f"{name}.jsonl"
    guard = StabilityGuard(model, opt, scheduler=sched, sampler=sampler, store=CheckpointStore(tmp_path / name),
                           config=GuardConfig(max_grad_norm=1.0, checkpoint_every=EVERY, stats="device" if deferred
                                              else "auto", defer_host_read=deferred or None), log_path=log,
                           treatment=UpdateSizeTest(UpdateSizeConfig(rollback=rollback)))
    for _, (b,) in guard.batches(loader, steps=STEPS):
        _, loss = model(b[:, :-1], b[:, 1:])
        loss.backward()
        guard.step(loss)
    guard.close()
    events = [r for r in map(json.loads, log.read_text().splitlines()) if r.get("event")]
    return guard, torch.cat([p.detach().flatten() for p in model.parameters()]), events


@pytest.mark.parametrize("deferred", [False, True], ids=["host_read", "deferred_read"])
def test_lr_jump_is_rolled_back_and_the_lr_brought_back(tmp_path, deferred):
    """Both read paths: at once (CPU), and one step late (the CUDA default, here on the CPU): the
    evidence of the jumped step arrives after the next update, and the rollback undoes both."""
    _, clean, clean_events = _train(tmp_path, "clean", 1.0, deferred=deferred)
    assert not [e for e in clean_events if e["event"] in ("rollback", "lr_cut", "halt")]  # healthy: untouched

    guard, rescued, events = _train(tmp_path, "jump", JUMP, deferred=deferred)
    acts = [e for e in events if e["event"] in ("rollback", "lr_cut", "halt")]
    rb, cut = acts[0], acts[1]
    # seen on the first jumped step (the LR jumped too), undone from the checkpoint before it
    assert rb["event"] == "rollback" and rb["step"] == JUMP_AT and rb["to_step"] == 50
    assert rb["cause"] == LR_CUT_CAUSE and "jumped 20x too" in rb["evidence"] and "skip_batches" not in rb
    assert cut["event"] == "lr_cut" and cut["factor"] == pytest.approx(1 / JUMP) and len(acts) == 2
    # the cut applies from the jump's first step on (the replayed steps run at the corrected LR)
    assert guard.ledger.lr_factor(JUMP_AT - 1) == 1.0 and guard.ledger.lr_factor(JUMP_AT) == pytest.approx(1 / JUMP)
    assert guard.ledger.rollbacks == 1 and guard.ledger.skip_ranges == []  # no data skipped
    # the damage undone: the rescued run ends where the clean one does (measured: exactly; the bound
    # allows for float rounding of the LR x20 x1/20)
    assert (rescued - clean).norm() / clean.norm() < 1e-6
    if not deferred:  # with the cut alone the jumped step's update stays in the weights
        _, cut_only, _ = _train(tmp_path, "cut_only", JUMP, rollback=False)
        assert (cut_only - clean).norm() / clean.norm() > 0.05  # measured: 0.19
