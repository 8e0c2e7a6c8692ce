"""FSDP2 on 2 gloo ranks under ``torchrun --max-restarts``: one rank SIGKILLed inside or right after
an in-process rollback (before the next save) is relaunched by torchrun, resumes through
``guard.restore()`` and ends bitwise equal to the uninterrupted guarded run (issue 23).

The job is :mod:`evals.fsdp_guarded_loop`: a bad-data pocket at batches [49, 55) makes the guard
roll back from step 51 to the step-30 checkpoint. The step-50 checkpoint was saved inside the
episode (steps 49-50 withheld, the episode open) and stays on disk until the rollback removes it. A
relaunch that loaded it would resume the abandoned timeline: with the removal disabled by hand, the
``after:0`` kill ended with different weights on both ranks.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.distributed, pytest.mark.slow]  # 4 torchrun jobs of 2 ranks, ~10 s each

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp: Path, name: str, *extra: str, max_restarts: int = 0) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT),
                                                       os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "--max-restarts", str(max_restarts), "-m", "evals.fsdp_guarded_loop",
           "--ckpt-dir", str(tmp / f"{name}-ck"), "--out", str(tmp / name), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _results(tmp: Path, name: str) -> list[dict]:
    return [torch.load(tmp / f"{name}-rank{r}.pt", weights_only=False) for r in (0, 1)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("torchrun-rollback")
    _run(tmp, "ref")
    out = _results(tmp, "ref")
    for rank in out:
        # one rollback, from the pocket back to step 30; the step-40 and step-50 checkpoints are abandoned
        assert rank["rollbacks"] == [(51, 30)] and rank["skip_ranges"] == [[49, 62]]
    return out


@pytest.mark.parametrize("kill,victim", [("booked", 1), ("after:0", 0), ("after:5", 1)])
def test_torchrun_sigkill_in_or_after_a_rollback_resumes_bitwise(reference, tmp_path, kill, victim):
    proc = _run(tmp_path, "killed", "--kill", kill, "--kill-rank", str(victim), max_restarts=1)
    assert "exitcode: -9" in proc.stderr  # the SIGKILL happened and torchrun restarted the job
    resumed = _results(tmp_path, "killed")
    for rank, (got, want) in enumerate(zip(resumed, reference, strict=True)):
        assert got["attempt"] == 1, rank
        assert all(torch.equal(a, b) for a, b in zip(got["shards"], want["shards"], strict=True)), rank
        for a, b in zip(got["optim"], want["optim"], strict=True):
            assert all(torch.equal(a[k], b[k]) if torch.is_tensor(b[k]) else a[k] == b[k] for k in b), rank
        assert torch.equal(got["rng"], want["rng"]), rank
        assert got["skip_ranges"] == want["skip_ranges"], rank
