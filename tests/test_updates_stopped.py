"""A run that logs but does not train (issue 23): the guard halts after ``max_withheld_streak``
consecutive withheld steps, and the analyser flags a stretch without updates in a log -- a
DeepSpeed-style grad norm of -1, a loss repeating the same float, the guard's skip on every step."""
from __future__ import annotations

import csv
import json

import pytest

from lossguard.classify.incident import IncidentKind as K
from lossguard.io import read_log

torch = pytest.importorskip("torch")
F = torch.nn.functional

from lossguard.analysis import analyze  # noqa: E402
from lossguard.detect.outlier import OutlierConfig  # noqa: E402
from lossguard.errors import LossguardError  # noqa: E402
from lossguard.guard import GuardConfig, StabilityGuard, TrainingHalted  # noqa: E402
from lossguard.testing.faults import Fault, FaultInjector  # noqa: E402
from evals.regression import regression_task  # noqa: E402


def _guarded(tmp_path, steps, *, cap, nan_from=30):
    """A real guarded loop whose gradients are NaN on every step from ``nan_from`` on; the ladder
    is set never to escalate (rollback_after), so only the streak cap can stop it."""
    model, sampler, loader = regression_task(2048, batch_size=16)
    det = OutlierConfig(min_points=20)
    cfg = GuardConfig(checkpoint_every=None, loss=det, grad_norm=det, rollback_after=10_000,
                      max_withheld_streak=cap)
    guard = StabilityGuard(model, torch.optim.AdamW(model.parameters(), lr=1e-2), sampler=sampler, config=cfg,
                           log_path=tmp_path / "run.jsonl", diagnosis_path=tmp_path / "halt.txt")
    inj = FaultInjector([Fault(kind="nan_grad", step=nan_from, steps=10_000, once=False)])
    for step, (x, y) in guard.batches(loader, steps=steps):
        loss = F.mse_loss(model(x), y)
        loss.backward()
        inj.grads(step, model)
        guard.step(loss)
    guard.close()
    return guard


def test_guard_halts_after_max_withheld_streak(tmp_path):
    with pytest.raises(TrainingHalted, match="consecutive steps had their update withheld"):
        _guarded(tmp_path, 200, cap=12)
    diagnosis = (tmp_path / "halt.txt").read_text()
    assert "12 consecutive steps" in diagnosis and "steps 30-41" in diagnosis
    halts = [json.loads(x) for x in (tmp_path / "run.jsonl").read_text().splitlines() if '"halt"' in x]
    assert halts[-1]["step"] == 41 and halts[-1]["withheld_streak"] == 12


def test_bad_cap_is_named():
    with pytest.raises(LossguardError, match="max_withheld_streak"):
        GuardConfig(max_withheld_streak=0)


def _stopped(path, **kw):
    return [i for i in analyze(read_log(path), **kw).incidents if i.kind is K.UPDATES_STOPPED]


def test_analyser_flags_the_guard_skipping_every_step(tmp_path):
    guard = _guarded(tmp_path, 170, cap=None)  # the run goes on, skipping, with no cap
    assert guard.ledger.skips == 140
    (inc,) = _stopped(tmp_path / "run.jsonl")
    assert inc.details["cause"] == "guard_skips" and inc.onset == 30 and inc.end is None
    assert inc.severity == "critical" and "140 steps" in inc.evidence


def _deepspeed_csv(path, stalled: range, n=600):
    import numpy as np

    rng = np.random.default_rng(3)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["step", "loss", "grad_norm"])
        for s in range(1, n + 1):
            loss = 3.0 * s ** -0.1 + 0.02 * rng.standard_normal()  # the forward still sees new data
            w.writerow([s, f"{loss:.6f}", -1 if s in stalled else f"{0.8 + 0.1 * rng.random():.4f}"])


def test_analyser_flags_a_deepspeed_grad_norm_of_minus_one(tmp_path):
    _deepspeed_csv(tmp_path / "ds.csv", range(300, 481))
    (inc,) = _stopped(tmp_path / "ds.csv")
    assert inc.details["cause"] == "grad_norm_sentinel" and (inc.onset, inc.end) == (300, 480)
    _deepspeed_csv(tmp_path / "short.csv", range(300, 340))  # 40 skipped steps: fp16 start-up-sized
    assert _stopped(tmp_path / "short.csv") == []


def test_analyser_flags_an_exactly_flat_loss(tmp_path):
    import numpy as np

    rng = np.random.default_rng(5)
    with open(tmp_path / "run.jsonl", "w") as fh:
        for s in range(0, 1000, 5):  # logged every 5 steps
            loss = 2.4135 if 400 <= s < 600 else 3.0 - s / 1000 + 0.01 * rng.standard_normal()
            fh.write(json.dumps({"step": s, "loss": loss}) + "\n")
    (inc,) = _stopped(tmp_path / "run.jsonl")
    assert inc.details["cause"] == "flat_loss" and (inc.onset, inc.end) == (400, 595)
    assert inc.details["points"] == 40


def test_cli_names_it(tmp_path):
    import subprocess
    import sys

    _deepspeed_csv(tmp_path / "ds.csv", range(100, 601))
    out = subprocess.run([sys.executable, "-m", "lossguard", "analyze", str(tmp_path / "ds.csv"), "--json"],
                         capture_output=True, text=True, timeout=120)
    kinds = [i["kind"] for i in json.loads(out.stdout)["incidents"]]
    assert "updates_stopped" in kinds


def test_simulate_halts_where_the_live_guard_halts(tmp_path):
    """The same cap in the replay: the log of an uncapped run whose every update from step 30 on was
    withheld, simulated with the cap the live run halted under, halts at the same step, same words."""
    from lossguard.simulate import simulate

    live = tmp_path / "live"
    live.mkdir()
    with pytest.raises(TrainingHalted):
        _guarded(live, 60, cap=12)
    (halt,) = [json.loads(x) for x in (live / "run.jsonl").read_text().splitlines() if '"halt"' in x]
    _guarded(tmp_path, 80, cap=None)  # the same run, recorded without a cap
    det = OutlierConfig(min_points=20)
    cfg = GuardConfig(checkpoint_every=None, loss=det, grad_norm=det, rollback_after=10_000, max_withheld_streak=12)
    sim = simulate(read_log(tmp_path / "run.jsonl"), cfg)
    assert sim.halted_at == halt["step"] == 41
    (rec,) = sim.of("halt")
    assert rec["reasons"] == halt["reasons"] and rec["withheld_streak"] == 12
    assert sim.skipped_steps == list(range(30, 42))
    uncapped = simulate(read_log(tmp_path / "run.jsonl"), GuardConfig(
        checkpoint_every=None, loss=det, grad_norm=det, rollback_after=10_000, max_withheld_streak=None))
    assert uncapped.halted_at is None and len(uncapped.skipped_steps) == 50
