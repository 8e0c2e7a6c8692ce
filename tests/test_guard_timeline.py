"""No re-entrant state load (issue 19): a rollback restores the checkpoint while the guard decides, but
the guard's own timeline (detector windows, open episode, data counter) is applied only once the
decision loop is over; and the executor and ``simulate`` resolve a rollback with one function."""
from __future__ import annotations

import pytest

from lossguard.recovery import Action, Decision, RecoveryRecipe, resolve_rollback

torch = pytest.importorskip("torch")
torch.set_num_threads(1)
F = torch.nn.functional


def test_one_resolver_for_target_and_halt():
    d = Decision(Action.ROLLBACK, 130, ["3 bad steps"], {"onset": 120})
    recipe = RecoveryRecipe(rollback_distance=20)
    r = resolve_rollback(d, [0, 50, 100, 110], recipe)
    assert not r.halts and r.target == 100 and r.decision is d
    h = resolve_rollback(d, [110], recipe)
    assert h.halts and h.target is None and h.decision.reasons[0] == "3 bad steps"
    assert h.decision.reasons[-1] == "no checkpoint at least 20 steps before the episode onset (step 120)"
    f = resolve_rollback(d, [110], recipe, framework=True)
    assert "the framework owns the data loader" in f.decision.reasons[-1]
    # A whole-log finding names its own distance (repeated data: the resume's own checkpoint).
    d0 = Decision(Action.ROLLBACK, 300, ["repeated"], {"onset": 300, "rollback_distance": 0})
    assert resolve_rollback(d0, [0, 100, 300], recipe).target == 300


def test_rollback_applies_the_guards_timeline_after_the_decision_loop(tmp_path):
    from lossguard.checkpoint.store import CheckpointStore
    from lossguard.detect.outlier import OutlierConfig
    from lossguard.guard import GuardConfig, StabilityGuard
    from lossguard.testing.faults import Fault, FaultInjector
    from evals.regression import regression_task

    model, sampler, loader = regression_task(4096, batch_size=16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    det = OutlierConfig(min_points=20)
    cfg = GuardConfig(checkpoint_every=20, recipe=RecoveryRecipe(rollback_distance=20, skip_margin=10), loss=det,
                      grad_norm=det)
    guard = StabilityGuard(model, opt, store=CheckpointStore(tmp_path / "ckpt", keep_last=10), sampler=sampler,
                           config=cfg)
    loads = []
    real_load = guard.load_state_dict

    def spy(sd):
        loads.append({"parked": guard._timeline._parking, "step_count": guard.step_count})
        real_load(sd)
    guard.load_state_dict = spy
    inj = FaultInjector([Fault(kind="bad_data", batches=(120, 130), factor=5.0)])
    for step, (x, y) in guard.batches(loader, steps=160):
        x, y = inj.batch(step, guard.batch_index, (x, y))
        F.mse_loss(model(x), y).backward()
        guard.step(F.mse_loss(model(x), y))
    (rb,) = [e for e in guard.events if e["event"] == "rollback"]
    assert rb["to_step"] == 100 and loads
    # Loaded once, outside the decision loop (not parked), before the step counter moved back.
    assert all(not ld["parked"] for ld in loads) and loads[0]["step_count"] == rb["step"] + 1
    assert guard.policy.episode is None or guard.policy.episode.onset_step > rb["step"]
