"""HF Trainer and Lightning really roll back through a process restart: a bad-data pocket makes the
guard's callback book a rollback in the run ledger and exit with code 75; ``torchrun --max-restarts``
relaunches the same script, which resumes from the booked checkpoint with the pocket's batches
withheld, and ends within 2% of the clean run's held-out loss."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.slow]  # two launches of a real Trainer each, one under torchrun

STEPS, EVERY, POCKET = 160, 20, (120, 130)


def _script(framework: str, out, *extra: str) -> list[str]:
    return ["-m", "evals.framework_restart", framework, "--out-dir", str(out), "--steps", str(STEPS),
            "--save-every", str(EVERY), *extra]


def _events(path):
    return [json.loads(line) for line in path.read_text().splitlines() if '"event"' in line]


@pytest.mark.parametrize("framework", ["lightning", "hf"])
def test_bad_pocket_rolls_back_through_a_restart_and_ends_near_the_clean_run(tmp_path, framework):
    pytest.importorskip("transformers" if framework == "hf" else "lightning")
    clean, pocket = tmp_path / "clean", tmp_path / "pocket"
    subprocess.run([sys.executable, *_script(framework, clean)], check=True, timeout=300, capture_output=True)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
                           "--max-restarts", "2", *_script(framework, pocket, "--pocket", *map(str, POCKET))],
                          timeout=400, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "exitcode: 75" in proc.stderr  # torchrun saw the guard's documented code and restarted

    assert not [e for e in _events(clean / "guard.jsonl") if e["event"] in ("rollback", "halt")]
    events = _events(pocket / "guard.jsonl")
    (rollback,) = [e for e in events if e["event"] == "rollback"]
    assert rollback["restart"] is True and rollback["exit_code"] == 75
    assert rollback["to_step"] == 100  # newest checkpoint >= 20 steps before the onset at 120
    start, stop = rollback["skip_batches"]
    assert start == POCKET[0] and stop >= POCKET[1]  # the episode plus the margin; covers the pocket
    skipped = [e["step"] for e in events if e["event"] == "skip_data"]
    assert skipped == list(range(start, stop))  # the relaunched run withheld exactly the booked batches
    ledger = json.loads((pocket / "ledger.json").read_text())
    assert ledger["rollbacks"] == 1 and ledger["resume_from"] is None and not ledger["halted"]
    assert ledger["skip_ranges"] == [[start, stop]]

    got = json.loads((pocket / "result.json").read_text())
    want = json.loads((clean / "result.json").read_text())
    assert got["restart"] == 1
    assert abs(got["held_out_loss"] - want["held_out_loss"]) / want["held_out_loss"] < 0.02, (got, want)
