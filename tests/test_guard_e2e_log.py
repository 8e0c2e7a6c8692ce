"""End to end: the guard's JSONL log, read by ``read_log`` and analysed, shows the spike at the step
the guard skipped -- the analyser and the guard share one outlier test."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)
F = torch.nn.functional

from lossguard.checkpoint.store import CheckpointStore  # noqa: E402
from lossguard.data.sampler import ResumableSampler  # noqa: E402
from lossguard.detect.outlier import OutlierConfig, score  # noqa: E402
from lossguard.guard import GuardConfig, StabilityGuard  # noqa: E402
from lossguard.recovery import RecoveryRecipe  # noqa: E402
from lossguard.io import read_log  # noqa: E402
from lossguard.metrics import GRAD_NORM, LOSS  # noqa: E402
from lossguard.testing.faults import Fault, FaultInjector  # noqa: E402


def guarded_run(tmp_path, faults, steps, **cfg):
    torch.manual_seed(1)
    X = torch.randn(4096, 8)
    Y = X @ torch.randn(8, 1) + 0.1 * torch.randn(4096, 1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    sampler = ResumableSampler(4096, batch_size=16, seed=0)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_sampler=sampler)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    base = dict(checkpoint_every=25, recipe=RecoveryRecipe(rollback_distance=25, skip_margin=10))
    base.update(cfg)
    guard = StabilityGuard(model, opt, store=CheckpointStore(tmp_path / "ckpt", keep_last=10), sampler=sampler,
                           config=GuardConfig(**base), log_path=tmp_path / "run.jsonl")
    inj = FaultInjector(faults)
    for step, (x, y) in guard.batches(loader, steps=steps):
        x, y = inj.batch(step, guard.batch_index, (x, y))
        loss = inj.loss(step, F.mse_loss(model(x), y))
        loss.backward()
        inj.grads(step, model)
        guard.step(loss)
    guard.close()
    return guard, tmp_path / "run.jsonl"


def test_report_flags_exactly_the_steps_the_guard_skipped(tmp_path):
    # (spikes after the fast initial descent: while the loss falls steeply its trailing median lags)
    # (skips only -- rollback_after is out of reach -- so the log is one segment)
    guard, path = guarded_run(tmp_path, [Fault(kind="loss_spike", step=250, factor=20.0),
                                         Fault(kind="loss_spike", step=330, factor=20.0),
                                         Fault(kind="nan_grad", step=300)], steps=360, rollback_after=1000)
    skipped = sorted(e["step"] for e in guard.events if e["event"] == "skip")
    assert {250, 300, 330} <= set(skipped)
    log = read_log(path)
    steps, loss = log.live(LOSS)
    gsteps, gnorm = log.live(GRAD_NORM)
    assert list(steps) == list(range(360)) and list(gsteps) == list(steps)
    cfg = guard.config
    flagged = score(loss, cfg.loss).outlier | score(gnorm, cfg.grad_norm).outlier
    assert sorted(steps[flagged].tolist()) == skipped  # same test, same steps, read back from the log
    assert {e["step"] for e in log.events if e["event"] == "skip"} == set(skipped)


def test_analyze_shows_the_spike_at_the_skipped_step(tmp_path):
    analysis = pytest.importorskip("lossguard.analysis")
    if not hasattr(analysis, "analyze"):
        pytest.skip("lossguard.analysis.analyze is not there yet")
    guard, path = guarded_run(tmp_path, [Fault(kind="loss_spike", step=250, factor=20.0)], steps=320,
                              rollback_after=1000)
    assert 250 in [e["step"] for e in guard.events if e["event"] == "skip"]
    result = analysis.analyze(read_log(path))
    on_loss = [i for i in result.incidents if i.metric == LOSS]
    assert any(i.onset == 250 or i.peak == 250 for i in on_loss), result.incidents
    assert any(a["event"] == "skip" and a["step"] == 250 for a in result.guard_actions)


def test_rollback_log_stitches_into_the_timeline_the_guard_kept(tmp_path):
    guard, path = guarded_run(tmp_path, [Fault(kind="bad_data", batches=(100, 110), factor=5.0)], steps=180,
                              loss=OutlierConfig(min_points=20), grad_norm=OutlierConfig(min_points=20))
    (rb,) = [e for e in guard.events if e["event"] == "rollback"]
    log = read_log(path)
    assert len(log.segments) == 2 and log.segments[1].first_step == rb["to_step"]
    steps, loss = log.live(LOSS)
    assert list(steps) == list(range(180))  # one live point per step: the superseded ones are dead
    assert np.all(loss[rb["to_step"]:] < 5.0)  # the live timeline after the rollback never saw the pocket
