"""`lossguard verify-resume`: exact resume passes (exit 0); repeated, missing or reordered data and
loss differences are reported (exit 1); protocol errors exit 2 without a traceback.

A tiny torch-free protocol script covers every branch quickly; the real training loop and its
deliberately broken variant (restarts its data stream on resume) are the slow end-to-end proofs.
"""
from __future__ import annotations

import json
import sys
import textwrap

import pytest

from lossguard.checkpoint.verify import compare
from lossguard.cli import main

SCRIPT = textwrap.dedent("""
    import json, os, sys
    mode, n = sys.argv[1], 20
    log, ck = os.environ["LOSSGUARD_LOG"], os.environ["LOSSGUARD_CKPT_DIR"]
    stop = None if mode == "ignore-stop" else os.environ.get("LOSSGUARD_STOP_AT")
    if mode == "crash":
        sys.exit("boom: out of memory")
    os.makedirs(ck, exist_ok=True)
    state = os.path.join(ck, "state")
    step = pos = 0
    if os.path.exists(state) and mode != "no-resume":
        step, pos = map(int, open(state).read().split())
        if mode == "restart-data":
            pos = 0
    resumed, start = step > 0, step
    with open(log, "a") as fh:
        while step < n:
            step += 1
            p = pos
            if mode == "reorder" and resumed and step in (start + 1, start + 2):
                p = pos + 1 if step == start + 1 else pos - 1  # swap the first two batches after the resume
            ids = [(2 * p) % 60, (2 * p + 1) % 60]
            pos += 1
            loss = sum(ids) / step + (1e-9 if mode == "noisy" and resumed else 0.0)
            fh.write(json.dumps({"step": step, "loss": loss, "batch_ids": ids}) + "\\n")
            if stop and step == int(stop):
                break
    open(state, "w").write(f"{step} {pos}")
""")


@pytest.fixture()
def script(tmp_path):
    path = tmp_path / "proto.py"
    path.write_text(SCRIPT)
    return lambda mode, *opts: ["verify-resume", *opts, "--", sys.executable, str(path), mode]


def test_exact_resume_exits_0(script, capsys):
    assert main(script("good", "--stop-at", "7")) == 0
    out = capsys.readouterr().out
    assert "resumed at step 8" in out and "RESULT: resume is exact" in out


def test_restarted_data_stream_is_reported_as_repeated_and_missing(script, capsys):
    assert main(script("restart-data", "--stop-at", "5", "--json")) == 1
    d = json.loads(capsys.readouterr().out)
    # the second half re-reads batches 0.. instead of 5..: 15 steps x 2 ids re-seen at step 6+
    assert d["resumed"] and not d["ok"]
    assert d["first_batch_diff"][0] == 6 and d["repeated"][0] == [6, 0, 1]
    assert d["n_repeated"] == 10 and d["n_missing_ids"] == 10  # ids 0..9 re-seen, 30..39 never seen
    assert d["first_loss_diff"][0] == 6


def test_reordered_data_and_tolerance(script, capsys):
    assert main(script("reorder", "--stop-at", "10")) == 1
    out = capsys.readouterr().out
    assert "reordered data" in out and "DIFFERS from step 11" in out and "repeated" not in out
    assert main(script("noisy", "--stop-at", "10")) == 1
    assert "first difference at step 11" in capsys.readouterr().out
    assert main(script("noisy", "--stop-at", "10", "--atol", "1e-6")) == 0


def test_script_that_does_not_resume_is_caught(script, capsys):
    assert main(script("no-resume", "--stop-at", "4")) == 1
    assert "RESUME NOT DETECTED" in capsys.readouterr().out


@pytest.mark.parametrize("mode, message", [("crash", "exited with code 1"), ("ignore-stop", "last step was 20")])
def test_protocol_errors_exit_2_without_traceback(script, capsys, mode, message):
    assert main(script(mode, "--stop-at", "4")) == 2
    err = capsys.readouterr().err
    assert message in err and "fix:" in err and "Traceback" not in err


def test_no_command_is_a_usage_error(capsys):
    assert main(["verify-resume"]) == 2
    assert "no training command" in capsys.readouterr().err


def test_compare_counts_missing_steps():
    straight = {s: (1.0, [s]) for s in range(1, 7)}
    d = compare(straight, {1: (1.0, [1]), 2: (1.0, [2])}, {3: (1.0, [3]), 5: (1.0, [5]), 6: (1.0, [6])}, stop_at=2)
    assert d.resumed and d.missing_steps == [4] and not d.ok and d.n_missing_ids == 1


TRAIN = [sys.executable, "-m", "evals.train_loop", "--steps", "24", "--save-every", "10"]


@pytest.mark.slow  # six fresh interpreters running real training
def test_real_training_loop_passes_and_its_broken_variant_fails(capsys):
    assert main(["verify-resume", "--stop-at", "9", "--", *TRAIN]) == 0
    assert "RESULT: resume is exact" in capsys.readouterr().out
    assert main(["verify-resume", "--stop-at", "9", "--", *TRAIN, "--broken-resume"]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS from step 10" in out and "repeated data" in out and "already seen at step 1" in out


def test_logs_without_batch_ids_compare_losses_only(tmp_path):
    from lossguard.checkpoint.verify import read_steps
    from lossguard.errors import LogFormatError

    log = tmp_path / "run.jsonl"
    log.write_text('{"step": 1, "loss": 0.5}\n{"step": 1, "event": "resume"}\n{"step": 2, "loss": null}\n'
                   '{"step": 2, "loss": NaN}\n')
    steps = read_steps(log)
    assert list(steps) == [1, 2] and steps[1] == (0.5, None)
    d = compare(steps, {1: steps[1]}, {2: steps[2]}, stop_at=1)
    assert d.ok and not d.has_ids  # NaN == NaN counts as reproduced
    log.write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "loss": \n')
    with pytest.raises(LogFormatError, match="line 2"):
        read_steps(log)
