"""A crash at any moment of an in-process rollback resumes on the new timeline (issue 23).

A real process (:mod:`evals.guarded_loop`: a guarded MLP with dropout and a bad-data
pocket) rolls back from step ~52 to the checkpoint of step 20, abandoning the checkpoint of step
40. It is SIGKILLed at five moments of that rollback (ledger booked / one abandoned checkpoint
removed / all removed / target loaded / rollback done), then relaunched; every relaunch must end
bitwise equal to the uninterrupted guarded run: same per-step losses, weights, optimizer and
scheduler state, RNG. Before the fix, a kill after the rollback resumed from the abandoned step-40
checkpoint and diverged from step 41 on.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from lossguard.checkpoint.store import CheckpointStore  # noqa: E402
from lossguard.recovery.ledger import RunLedger  # noqa: E402
from evals.guarded_loop import KILL_POINTS  # noqa: E402

STEPS = 90


def _run(d, name, *extra, check=True):
    cmd = [sys.executable, "-m", "evals.guarded_loop", "--steps", str(STEPS), "--pocket", "50:56",
           "--ckpt-dir", str(d / name), "--log", str(d / f"{name}.jsonl"), "--out", str(d / f"{name}.pt"), *extra]
    return subprocess.run(cmd, check=check, timeout=120, capture_output=True, text=True)


def live_curve(path) -> dict[int, float]:
    """step -> loss, the last record of each step winning (a resumed run re-logs what it replays)."""
    out = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if "loss" in rec:
            out[rec["step"]] = rec["loss"]
    return out


def assert_same(a, b, where=""):
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{k}]")
    else:
        assert a == b, where


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    d = tmp_path_factory.mktemp("ref")
    _run(d, "ref", "--guard-log", str(d / "ref.guard.jsonl"))
    events = [json.loads(x) for x in (d / "ref.guard.jsonl").read_text().splitlines()]
    (rb,) = [e for e in events if e.get("event") == "rollback"]
    assert rb["to_step"] == 20 and 40 < rb["step"] < 60  # the step-40 checkpoint is abandoned
    return d


@pytest.mark.slow  # 11 interpreter starts: ~45 s on a busy 2-core machine
@pytest.mark.parametrize("point", KILL_POINTS)
def test_sigkill_inside_or_right_after_a_rollback_resumes_on_the_new_timeline(reference, tmp_path, point):
    killed = _run(tmp_path, "run", "--kill", point, check=False)
    assert killed.returncode == -9, killed.stderr[-2000:]
    ledger = RunLedger.load(tmp_path / "run" / "ledger.json")
    assert ledger.rollbacks == 1 and ledger.skip_ranges  # booked before anything else happened
    # what restore() must not find: any checkpoint of the abandoned timeline as the newest one
    # without resume_from naming the target
    steps = CheckpointStore(tmp_path / "run").steps()
    assert ledger.resume_from == 20 or steps[-1] == 20, (point, ledger.resume_from, steps)
    _run(tmp_path, "run")  # relaunch: resumes and finishes
    assert live_curve(tmp_path / "run.jsonl") == live_curve(reference / "ref.jsonl")
    assert_same(torch.load(tmp_path / "run.pt"), torch.load(reference / "ref.pt"), point)
    assert RunLedger.load(tmp_path / "run" / "ledger.json").resume_from is None


def test_supersede_after_removes_every_newer_checkpoint_and_nothing_else(tmp_path):
    store = CheckpointStore(tmp_path, keep_last=10)
    for step in (0, 20, 40, 60):
        store.save(step, {"w": torch.tensor([float(step)])})
    (tmp_path / "step-00000080").mkdir()  # a damaged newer one is removed too
    assert store.supersede_after(20) == [80, 60, 40]
    assert store.steps() == [0, 20] and sorted(p.name for p in tmp_path.iterdir()) == ["step-00000000",
                                                                                        "step-00000020"]
    assert store.load()["w"].item() == 20.0
    assert store.supersede_after(20) == []  # idempotent: a resumed process finishing the job


def test_framework_resume_finishes_a_booked_rollback(tmp_path):
    """HF: the relaunched script's resume_checkpoint() removes the abandoned checkpoints, so a crash
    after the resumed run cleared resume_from cannot bring them back."""
    from lossguard.integrations._checkpoints import FrameworkCheckpoints, resume_checkpoint
    from lossguard.recovery.ledger import LEDGER_FILE

    for step in (25, 50, 75):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        (d / "trainer_state.json").write_text("{}")
    ledger = RunLedger()
    ledger.resume_from = 25
    ledger.save(tmp_path / LEDGER_FILE)
    assert resume_checkpoint(tmp_path, "hf") == str(tmp_path / "checkpoint-25")
    assert FrameworkCheckpoints(tmp_path, "hf").steps() == [25]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".superseded")]
    for name in ("step=20.ckpt", "epoch=0-step=40.ckpt", "last.ckpt"):  # Lightning: files
        (tmp_path / name).write_bytes(b"c")
    assert FrameworkCheckpoints(tmp_path, "lightning").supersede_after(20) == [40]
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".ckpt") == ["last.ckpt", "step=20.ckpt"]


def test_sharded_store_supersede_waits_for_an_async_save(tmp_path):
    """A save in flight when the rollback starts would publish an abandoned step after the removal."""
    from lossguard.checkpoint.sharded import ShardedCheckpointStore

    store = ShardedCheckpointStore(tmp_path, keep_last=10, async_saves=True)
    for step in (10, 20):
        store.save(step, {"sharded": {"w": torch.full((4,), float(step))}, "rank": {"step": step}})
    pending = store.async_save(30, {"sharded": {"w": torch.full((4,), 30.0)}, "rank": {"step": 30}})
    assert store.supersede_after(10) == [30, 20] and pending.done()
    assert store.steps() == [10]
