"""Fault injection drives every branch of the guard on a real model that really trains:
skip, rollback + skip data, LR cut, loss-scale reset, halt, shadow mode and the replay check."""
from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from lossguard.checkpoint.store import CheckpointStore  # noqa: E402
from evals.regression import regression_task  # noqa: E402
from lossguard.detect.outlier import OutlierConfig  # noqa: E402
from lossguard.guard import GuardConfig, SkipStepAdamW, StabilityGuard, TrainingHalted  # noqa: E402
from lossguard.recovery import RecoveryRecipe  # noqa: E402
from lossguard.testing.faults import Fault, FaultInjector  # noqa: E402

N, BS = 4096, 16
torch.set_num_threads(1)  # 2 shared cores: never oversubscribe


def make(tmp_path, *, opt="adamw", scaler=None, **cfg):
    """A small regression MLP with a resumable sampler, checkpoint store and guard."""
    model, sampler, loader = regression_task(N, batch_size=BS)
    o = (SkipStepAdamW if opt == "skipadamw" else torch.optim.AdamW)(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(o, lambda s: min(1.0, (s + 1) / 10))
    det = OutlierConfig(min_points=20)
    base = dict(checkpoint_every=20, recipe=RecoveryRecipe(rollback_distance=20, skip_margin=10), loss=det, grad_norm=det)
    base.update(cfg)
    guard = StabilityGuard(model, o, store=CheckpointStore(tmp_path / "ckpt", keep_last=10), sampler=sampler,
                           scheduler=sched, scaler=scaler, config=GuardConfig(**base), log_path=tmp_path / "run.jsonl")
    return guard, loader


def train(guard, loader, faults, steps=200, *, replay=True, on_step=None):
    """The plain guarded loop; returns the injector and {step: (batch_index, loss)} of every step run."""
    inj = FaultInjector(faults)
    model, seen = guard.model, []
    for step, (x, y) in guard.batches(loader, steps=steps):
        x, y = inj.batch(step, guard.batch_index, (x, y))
        loss = inj.loss(step, F.mse_loss(model(x), y))
        if guard.scaler is not None:
            guard.scaler.scale(loss).backward()
        else:
            loss.backward()
        inj.grads(step, model)
        if on_step is not None:
            on_step(step, guard)
        seen.append((step, guard.batch_index))
        guard.step(loss, replay=(lambda x=x, y=y: F.mse_loss(model(x), y)) if replay else None)
    return inj, seen


def events(guard, kind):
    return [e for e in guard.events if e["event"] == kind]


def test_nan_gradient_is_skipped(tmp_path):
    guard, loader = make(tmp_path)
    train(guard, loader, [Fault(kind="nan_grad", step=50)], steps=80)
    (skip,) = [e for e in events(guard, "skip") if e["step"] == 50]
    assert skip["reasons"] == ["non-finite gradient"]
    assert not events(guard, "rollback")
    assert all(torch.isfinite(p).all() for p in guard.model.parameters())


def test_bad_data_pocket_rolls_back_and_skips_the_data(tmp_path):
    guard, loader = make(tmp_path)
    _, seen = train(guard, loader, [Fault(kind="bad_data", batches=(120, 130), factor=5.0)], steps=200)
    (rb,) = events(guard, "rollback")
    assert rb["onset"] == 120 and rb["to_step"] == 100          # newest checkpoint >= 20 steps before onset
    assert rb["skip_batches"] == [120, 122 + 1 + 10]            # 3 bad batches + margin 10
    after = [b for s, b in seen[seen.index((rb["step"], 122)) + 1:]]
    assert after[0] == 100 and not any(120 <= b < 133 for b in after)  # data rewound, then the pocket skipped
    assert guard.sampler.skipped == [(120, 133)]
    assert guard.step_count == 200 and guard.policy.rollbacks == 1
    assert [e["step"] for e in events(guard, "skip")] == [120, 121, 122]
    assert guard.last_record.loss < 1.0  # the run recovered
    assert rb["suspect"] == "data" and not events(guard, "lr_cut")  # a one-off pocket: no LR cut
    assert guard.policy.lr_factor(guard.step_count) == 1.0


def test_lr_cut_after_rollback(tmp_path):
    guard, loader = make(tmp_path, lr_cut_from=1, lr_cut_steps=30,
                         recipe=RecoveryRecipe(rollback_distance=20, skip_margin=10, lr_cut_factor=0.5))
    train(guard, loader, [Fault(kind="bad_data", batches=(120, 130), factor=5.0)], steps=160)
    (cut,) = events(guard, "lr_cut")
    assert cut["step"] == 100 and cut["until_step"] == 130 and cut["factor"] == 0.5
    lrs = {}
    for line in (tmp_path / "run.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "event" not in r:
            lrs[r["step"]] = r["lr"]  # the last segment's value wins
    assert lrs[110] == pytest.approx(0.5e-2) and lrs[140] == pytest.approx(1e-2)
    assert guard.optimizer.param_groups[0]["lr"] == pytest.approx(1e-2)  # the schedule itself untouched


def test_spike_that_recurs_after_its_data_was_skipped_cuts_the_lr_decisively(tmp_path):
    """An instability tied to the step and the LR, not to the data: it fires at steps 120-122 while
    the LR is uncut, whatever batch is read -- the signature of an LR too high for the weights."""
    guard, loader = make(tmp_path, lr_cut_from=0)  # no mild hedge: only the recurrence rule may cut
    inj, model = FaultInjector([Fault(kind="loss_spike", step=120, steps=3, factor=30.0, once=False)]), guard.model
    for step, (x, y) in guard.batches(loader, steps=200):
        loss = F.mse_loss(model(x), y)
        if guard.policy.lr_factor(step) == 1.0:
            loss = inj.loss(step, loss)
        loss.backward()
        guard.step(loss, replay=lambda x=x, y=y: F.mse_loss(model(x), y) * (30.0 if 120 <= step < 123 else 1.0))
    first, second, third = events(guard, "rollback")
    assert first["suspect"] == "data" and first["to_step"] == 100 and first["skip_batches"] == [120, 133]
    # Back at the same place on other data: one recurrence is not yet enough (recurrences_to_cut=2).
    assert second["suspect"] == "data" and second["recurrence"] == 1 and second["skip_batches"][0] == 133
    assert third["suspect"] == "optimizer" and third["recurrence"] == 2 and third["onset"] == 120
    assert third["recurrence_of"] == 120 and third["skip_batches"][0] == 146
    assert any("optimizer instability" in r for r in third["reasons"])
    (cut,) = events(guard, "lr_cut")                               # none before the second recurrence
    assert cut["cause"] == "recurrence" and cut["factor"] == 0.1 and cut["until_step"] is None
    assert cut["step"] == 100 and "optimizer instability" in cut["reasons"][0]
    lrs = {}
    for line in (tmp_path / "run.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "event" not in r:
            lrs[r["step"]] = r["lr"]  # the last segment's value wins
    assert lrs[110] == pytest.approx(1e-3) and lrs[199] == pytest.approx(1e-3)  # held to the end
    assert guard.optimizer.param_groups[0]["lr"] == pytest.approx(1e-2)         # the schedule untouched
    assert not guard.halted and guard.step_count == 200 and guard.policy.rollbacks == 3
    assert inj.fired.count(("loss_spike", 120)) == 3               # it did not come back after the cut


def test_loss_scale_collapse_is_reset(tmp_path):
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=10_000)
    guard, loader = make(tmp_path, scaler=scaler, min_loss_scale=1.0, max_overflow_streak=50)
    train(guard, loader, [Fault(kind="inf_grad", step=40, steps=10)], steps=70)
    (reset,) = events(guard, "loss_scale_reset")
    assert reset["step"] == 48 and reset["new_scale"] == 256.0      # 2^8 halved 9 times < 1 at step 48
    assert not events(guard, "skip")  # overflows are the scaler's business, not spikes
    assert scaler.get_scale() == 128.0  # reset to 256 at step 48, halved once more by the overflow at 49


def test_poisoned_optimizer_state_rolls_back_instead_of_resetting_the_scale(tmp_path):
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 4, growth_interval=10_000)
    guard, loader = make(tmp_path, scaler=scaler, min_loss_scale=1.0)

    done = []

    def poison(step, g):  # once, like a real overflow that slipped into a moment
        if step == 45 and not done:
            done.append(step)
            next(iter(g.optimizer.state.values()))["exp_avg_sq"].view(-1)[0] = float("nan")
    train(guard, loader, [Fault(kind="inf_grad", step=40, steps=10)], steps=70, on_step=poison)
    # Collapse at step 44 (state still finite): reset. Collapse at 49 (a moment is NaN): roll back.
    resets = [e["step"] for e in events(guard, "loss_scale_reset") if e["reasons"] != ["reset with the rollback"]]
    assert resets == [44]
    (rb,) = events(guard, "rollback")
    assert rb["step"] == 49 and "optimizer state is not finite" in rb["reasons"][0] and rb["to_step"] == 20
    assert all(torch.isfinite(v).all() for st in guard.optimizer.state.values() for v in st.values())


def test_persistent_fault_halts_with_a_diagnosis(tmp_path):
    guard, loader = make(tmp_path, max_rollbacks=1, rollback_after=2)
    with pytest.raises(TrainingHalted) as e:
        train(guard, loader, [Fault(kind="nan_grad", step=60, steps=200, once=False)], steps=300)
    assert [x["to_step"] for x in events(guard, "rollback")] == [40]
    (halt,) = events(guard, "halt")
    assert halt["resume_from"] == 40 and "rollback budget spent" in " ".join(halt["reasons"])
    text = (tmp_path / "run.halt.txt").read_text()
    assert "Resume from checkpoint step 40" in text and "step-00000040" in text
    assert "rollback budget" in str(e.value)
    assert guard.halted and guard.step_count == 62


def test_shadow_mode_only_reports(tmp_path):
    guard, loader = make(tmp_path, shadow=True)
    train(guard, loader, [Fault(kind="bad_data", batches=(120, 130), factor=5.0)], steps=160)
    assert guard.step_count == 160 and not guard.halted  # never stops, never rewinds
    rb = events(guard, "rollback")[0]
    assert rb["shadow"] and "to_step" not in rb and rb["would_roll_back_to"] == 100
    # the bad batches were trained on, so the damage lasts and the guard keeps saying so
    assert guard.policy.rollbacks >= 1 and guard.last_record.loss > 1.0
    assert all(e.get("shadow") for e in guard.events)
    assert guard.sampler.skipped == []  # nothing was skipped for real


def test_replay_tells_a_transient_fault_from_a_reproducible_one(tmp_path):
    guard, loader = make(tmp_path)
    # The injector scales the loss only in the training forward; the replay recomputes it cleanly,
    # exactly as a one-off hardware fault would not reproduce.
    train(guard, loader, [Fault(kind="loss_spike", step=70, factor=30.0),
                          Fault(kind="bad_data", batches=(150, 151), factor=5.0)], steps=160)
    replays = {e["step"]: e for e in events(guard, "replay")}
    assert replays[70]["transient"] and not replays[70]["reproduced"]
    assert replays[150]["reproduced"] and not replays[150]["transient"]
    skips = {e["step"]: e for e in events(guard, "skip")}
    assert skips[70]["transient"] and "episode_bad_steps" not in skips[70]
    assert skips[150]["episode_bad_steps"] == 1


@pytest.mark.parametrize("defer", [False, True])
def test_device_gate_with_and_without_deferred_read(tmp_path, defer):
    guard, loader = make(tmp_path, opt="skipadamw", stats="device", defer_host_read=defer)
    assert guard.gate == "device" and type(guard.judge).__name__ == "DeviceJudge"
    train(guard, loader, [Fault(kind="nan_grad", step=50),
                          Fault(kind="bad_data", batches=(120, 130), factor=5.0)], steps=200, replay=False)
    assert 50 in [e["step"] for e in events(guard, "skip")]
    (rb,) = events(guard, "rollback")
    # Deferred: the host learns of step 122 while step 123 runs; the rollback acts then, to the same target.
    assert rb["to_step"] == 100 and rb["skip_batches"] == [120, 133]
    assert guard.last_record.loss < 1.0 and math.isfinite(guard.last_record.grad_norm)
