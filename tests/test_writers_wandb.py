"""W&B offline runs, written by the real ``wandb`` SDK, read from the ``run-<id>.wandb`` files a user has.

The runs log the way HF's ``WandbCallback`` does: ``train/loss``, ``train/learning_rate``,
``train/epoch`` and ``train/global_step`` in one call per step, eval results in calls of their own
(so W&B's ``_step`` counts calls, not training steps). The first launch crashes at step 50 (an
exception: the SDK records exit code 1); the second resumes the same run id from step 41. A third
case is a launch killed outright (``os._exit``) before the SDK wrote its history. Each launch runs
in its own process, as in real life (the SDK starts a service process).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lossguard.errors import LossguardError
from lossguard.io import read_log
from lossguard.metrics import EPOCH, LOSS, LR, VAL_LOSS

pytest.importorskip("wandb")

SCRIPT = '''
import os, sys, wandb
out, run_id, launch, first, last, crash = sys.argv[1:7]
launch, first, last = int(launch), int(first), int(last)
run = wandb.init(project="lossguard-test", id=run_id, resume="allow", mode="offline", dir=out)
for s in range(first, last + 1):
    run.log({"train/loss": 3.0 - 0.01 * s + 0.5 * launch, "train/learning_rate": 1e-3 * (1 + launch),
             "train/epoch": s / 20, "train/global_step": s})
    if s % 20 == 0:
        run.log({"eval/loss": 2.5 - 0.01 * s, "train/epoch": s / 20, "train/global_step": s})
if crash == "crash":
    raise RuntimeError("simulated crash")
if crash == "kill":
    os._exit(1)
run.finish()
'''


def _launch(out: Path, run_id: str, launch: int, first: int, last: int, crash: str = "ok") -> None:
    script = out.parent / "wandb_launch.py"
    script.write_text(SCRIPT)
    subprocess.run([sys.executable, str(script), str(out), run_id, str(launch), str(first), str(last),
                    crash], check=crash == "ok", capture_output=True, timeout=120,
                   env={"WANDB_SILENT": "true", "PATH": "/usr/bin:/bin", "HOME": str(out.parent)})


@pytest.fixture(scope="module")
def wandb_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wandb") / "out"
    out.mkdir()
    _launch(out, "runabc12", 0, 1, 50, crash="crash")
    time.sleep(1.1)  # offline-run-<date>-<id> directories are named to the second
    _launch(out, "runabc12", 1, 41, 60)
    return out


def _loss(s: int, launch: int) -> float:
    return 3.0 - 0.01 * s + 0.5 * launch


def test_offline_run_with_a_resume(wandb_run):
    files = sorted((wandb_run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2
    log = read_log(wandb_run / "wandb")
    assert log.format == "wandb" and log.metadata["run_id"] == "runabc12"
    assert [g.kind for g in log.segments] == ["start", "rollback"]
    # train/global_step is the step; it and W&B's _step/_runtime/_timestamp are not metrics
    assert set(log.series) == {LOSS, LR, EPOCH, VAL_LOSS}
    steps, values = log.live(LOSS)
    assert steps.tolist() == list(range(1, 61))
    np.testing.assert_allclose(values, [_loss(s, 0 if s <= 40 else 1) for s in range(1, 61)])
    assert len(log.series[LOSS]) == 70
    assert log.live(VAL_LOSS)[0].tolist() == [20, 40, 60]
    assert any("exited with code 1" in w for w in log.metadata["warnings"])  # the crashed launch
    assert not list((wandb_run / "wandb").glob("debug-cli*"))  # reading wrote nothing into the run


def test_one_file_alone(wandb_run):
    second = sorted((wandb_run / "wandb").glob("offline-run-*/run-*.wandb"))[1]
    log = read_log(second)
    assert log.live(LOSS)[0].tolist() == list(range(41, 61))
    assert log.live(LR)[1].tolist() == [2e-3] * 20


def test_directory_without_history_says_what_to_do(wandb_run, tmp_path):
    run_dir = sorted((wandb_run / "wandb").glob("offline-run-*"))[-1]
    copy = tmp_path / "run"
    shutil.copytree(run_dir / "logs", copy / "logs", symlinks=False, ignore_dangling_symlinks=True)
    shutil.copytree(run_dir / "files", copy / "files")
    with pytest.raises(LossguardError, match="W&B run directory without the run's history") as err:
        read_log(copy)
    assert "wandb sync" in str(err.value) and "run-<id>.wandb" in str(err.value)


def test_two_runs_in_one_directory_is_an_error(wandb_run, tmp_path):
    mixed = tmp_path / "mixed"
    resumed = sorted((wandb_run / "wandb").glob("offline-run-*"))[-1]
    shutil.copytree(resumed, mixed / "wandb" / resumed.name, symlinks=True)
    _launch(mixed, "otherrun", 0, 1, 5)
    with pytest.raises(LossguardError, match="separate runs") as err:
        read_log(mixed)
    assert "'otherrun'" in str(err.value) and "'runabc12'" in str(err.value)
    assert read_log(mixed, only="*runabc12*").metadata["run_id"] == "runabc12"


def test_killed_launch_reads_cleanly(tmp_path):
    """A process killed outright leaves a file the SDK had written some or none of the history to:
    either what it holds is read with a warning, or the error says that nothing was logged."""
    out = tmp_path / "out"
    out.mkdir()
    _launch(out, "killed01", 0, 1, 30, crash="kill")
    try:
        log = read_log(out / "wandb")
    except LossguardError as exc:
        assert "no numeric history record" in str(exc)
    else:
        steps = log.live(LOSS)[0]
        assert steps.tolist() == list(range(1, len(steps) + 1))
        assert any("no exit record" in w for w in log.metadata["warnings"])


def test_truncated_and_corrupt_files(wandb_run, tmp_path):
    """A file cut mid-write (copied while the run is live) reads up to the cut, with a warning; a
    file with a bad header is a clean error from the SDK's reader."""
    whole = sorted((wandb_run / "wandb").glob("offline-run-*/run-*.wandb"))[0]
    cut = tmp_path / "run-cut.wandb"
    cut.write_bytes(whole.read_bytes()[:6000])
    log = read_log(cut)
    steps = log.live(LOSS)[0]
    assert 0 < len(steps) < 50 and steps.tolist() == list(range(1, len(steps) + 1))
    assert any("no exit record" in w for w in log.metadata["warnings"])
    bad = tmp_path / "run-bad.wandb"
    bad.write_bytes(b":W&B\x00\x01" + b"garbage" * 10)
    with pytest.raises(LossguardError, match="the W&B SDK cannot read this file"):
        read_log(bad)
