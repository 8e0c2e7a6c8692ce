"""Crash proof: SIGKILL the training process at random moments (>= 10 times, several of them while a
checkpoint is being written), resume each time; the final curve equals the uninterrupted run
bitwise and the last good checkpoint always loads."""
from __future__ import annotations

import random
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

from lossguard.checkpoint.store import CheckpointStore  # noqa: E402

from test_resume_exact import assert_same_tensors, curve  # noqa: E402

STEPS, EVERY, SAVE_DELAY = 70, 5, 0.3


def _cmd(ckpt, log, *extra):
    return [sys.executable, "-m", "evals.train_loop", "--steps", str(STEPS), "--save-every",
            str(EVERY), "--ckpt-dir", str(ckpt), "--log", str(log), "--dropout", "0.2", *extra]


@pytest.mark.slow  # ~13 interpreter starts: ~40 s idle, more on a loaded machine
def test_sigkill_at_random_moments_then_resume_gives_the_same_run(tmp_path):
    subprocess.run(_cmd(tmp_path / "a", tmp_path / "a.jsonl"), check=True, timeout=120)

    rng = random.Random(20261121)
    ckpt, log = tmp_path / "b", tmp_path / "b.jsonl"
    kills, save_kills, last_saved, finished = 0, 0, None, False
    while not finished:
        mode = None if kills >= 12 else ("save" if kills % 3 == 0 else "step")
        proc = subprocess.Popen(_cmd(ckpt, log, "--save-delay", str(SAVE_DELAY), "--progress"),
                                stdout=subprocess.PIPE, text=True)
        steps_here, target, pending, last_step = 0, rng.randint(1, 8), None, None
        for line in proc.stdout:
            word, step = line.split()
            step = int(step)
            if word == "SAVE_BEGIN":
                pending = step
            elif word == "SAVE_END":
                last_saved, pending = step, None
            elif word == "STEP":
                steps_here, last_step = steps_here + 1, step
            if mode == "save" and word == "SAVE_BEGIN":
                time.sleep(rng.uniform(0.02, 0.8 * SAVE_DELAY))  # inside the slowed payload write
                break
            if mode == "step" and word == "STEP" and steps_here >= target:
                time.sleep(rng.uniform(0.0, 0.01))  # somewhere in the next step (or its save)
                break
        else:
            finished = proc.wait(timeout=60) == 0
            assert finished, f"training exited with {proc.returncode}"
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        kills += 1
        leftovers = [p.name for p in ckpt.iterdir() if p.name.startswith(".tmp-")]
        if mode == "save":
            assert leftovers, "the kill was meant to land inside a checkpoint write"
            save_kills += 1
        store = CheckpointStore(ckpt)  # what the next process sees; it also clears the leftovers
        # the newest valid checkpoint is the last completed save, or (a kill landing just after a
        # step) one whose write had already been renamed into place; never a partial one
        in_flight = {pending, last_step if last_step and last_step % EVERY == 0 else None}
        allowed = {last_saved} | (in_flight if mode == "step" else set())
        allowed.discard(None)
        if not allowed:
            assert store.steps() == []
        else:
            newest = store.steps()[-1]
            assert newest in allowed
            assert store.load()["step"] == newest
        assert not [p for p in ckpt.iterdir() if p.name.startswith(".")]

    assert kills >= 10 and save_kills >= 4
    a, b = curve(tmp_path / "a.jsonl"), curve(log)
    assert sorted(b) == list(range(1, STEPS + 1)) and a == b
    final_a, final_b = CheckpointStore(tmp_path / "a").load(STEPS), CheckpointStore(ckpt).load(STEPS)
    for part in ("model", "optimizer", "scheduler", "data", "step"):
        assert_same_tensors(final_a[part], final_b[part], part)
    # the analyser's view of the crashed run's log: resumes become segments, re-logged steps of
    # killed processes are superseded, and the live curve is the uninterrupted one
    from lossguard.io import read_log

    steps, values = read_log(log).live("loss")
    assert steps.tolist() == list(range(1, STEPS + 1)) and values.tolist() == [a[s][0] for s in range(1, STEPS + 1)]
