"""A halt is final across relaunches, and the guard's state is plain Python.

``torchrun --max-restarts`` relaunches a job on any non-zero exit, a halt's too: the relaunched
guard must find ``halted`` in the run ledger and refuse to train (with the saved diagnosis, the
checkpoint to resume from and how to override) until a person clears it. And the timeline the
guard puts in every checkpoint (the judge's windows and statistics) holds no NumPy scalars, so a
checkpoint loads under torch's default ``torch.load(weights_only=True)``.
"""
from __future__ import annotations

import io

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)
F = torch.nn.functional

from lossguard.checkpoint.store import CheckpointStore  # noqa: E402
from evals.regression import regression_task  # noqa: E402
from lossguard.detect.outlier import OutlierConfig  # noqa: E402
from lossguard.guard import GuardConfig, StabilityGuard, TrainingHalted  # noqa: E402
from lossguard.errors import CheckpointError  # noqa: E402
from lossguard.integrations._state import guard_state, restore_guard  # noqa: E402
from lossguard.recovery import LEDGER_FILE, RecoveryRecipe, RunLedger  # noqa: E402
from lossguard.testing.faults import Fault, FaultInjector  # noqa: E402

N, BS = 1024, 16


def make(tmp_path, **cfg):
    model, sampler, loader = regression_task(N, batch_size=BS)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    det = OutlierConfig(min_points=20)
    config = GuardConfig(checkpoint_every=10, recipe=RecoveryRecipe(rollback_distance=10, skip_margin=5),
                         loss=det, grad_norm=det, **cfg)
    guard = StabilityGuard(model, opt, store=CheckpointStore(tmp_path / "ckpt", keep_last=10), sampler=sampler,
                           config=config, log_path=tmp_path / "run.jsonl")
    return guard, loader


def run(guard, loader, steps, faults=()):
    inj = FaultInjector(list(faults))
    for step, (x, y) in guard.batches(loader, steps=steps):
        loss = inj.loss(step, F.mse_loss(guard.model(x), y))
        loss.backward()
        inj.grads(step, guard.model)
        guard.step(loss)


def test_a_relaunch_after_a_halt_refuses_to_train_until_the_halt_is_cleared(tmp_path):
    guard, loader = make(tmp_path, max_rollbacks=0)   # the first needed rollback halts
    with pytest.raises(TrainingHalted):
        run(guard, loader, 60, [Fault(kind="nan_grad", step=30, steps=10)])
    halted_at = guard.step_count
    ledger_path = tmp_path / "ckpt" / LEDGER_FILE
    assert RunLedger.load(ledger_path).halted
    # The relaunch: the same script, the same checkpoint directory.
    with pytest.raises(TrainingHalted) as e:
        make(tmp_path, max_rollbacks=0)
    msg = str(e.value)
    assert "halted this run before (at step 3" in msg and "does not train on" in msg
    assert "rollback budget spent" in msg                      # the saved diagnosis' reasons
    assert "Resume from checkpoint step 20" in msg             # where to resume: newest <= onset 30 - 10
    assert "clear_halt()" in msg and str(ledger_path) in msg  # how to override
    # A person decides to train on: clear the halt; the new guard trains, from the checkpoint named.
    RunLedger.open(ledger_path).clear_halt("LR lowered")
    guard2, loader2 = make(tmp_path, max_rollbacks=0)
    assert guard2.restore(20) == 20
    run(guard2, loader2, 50)
    assert guard2.step_count == 50 and not guard2.halted
    hist = RunLedger.load(ledger_path).history
    assert [h["event"] for h in hist][-1] == "halt_cleared" and hist[-1]["why"] == "LR lowered"
    assert halted_at >= 32


@pytest.mark.parametrize("stats", ["host", "device"])
def test_guard_state_loads_with_torch_default_weights_only(tmp_path, stats):
    guard, loader = make(tmp_path, stats=stats)
    run(guard, loader, 150, [Fault(kind="nan_grad", step=40)])
    assert guard.ledger.skips >= 1 and guard.judge.warm
    state = {"timeline": guard.state_dict(), "ledger": guard.ledger.to_dict()}

    def leaves(x):
        if isinstance(x, dict):
            return [v for val in x.values() for v in leaves(val)]
        if isinstance(x, (list, tuple)):
            return [v for val in x for v in leaves(val)]
        return [x]
    kinds = {type(v) for v in leaves(state)}
    assert kinds <= {int, float, str, bool, type(None)}, kinds
    assert guard_state(guard) == state  # the callbacks save exactly this, with no conversion
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)   # torch's default since 2.6; failed on np.float64
    assert loaded["timeline"]["judge"]["loss"]["noise"] == state["timeline"]["judge"]["loss"]["noise"] > 0
    guard.load_state_dict(loaded["timeline"])
    restore_guard(guard, loaded)  # what a callback does with its own saved state
    with pytest.raises(CheckpointError, match="no 'timeline' and 'ledger'"):
        restore_guard(guard, loaded["timeline"])  # the guard's state alone is not a callback's state
