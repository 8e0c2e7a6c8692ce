"""What a new user gets wrong on the command line: one clear message, exit 2, no traceback, and the
user's files left exactly as they were. Each case runs the real ``lossguard`` in a subprocess."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def lossguard(*args: str, cwd: Path, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lossguard", *args], cwd=cwd, stdin=stdin,
                          capture_output=True, text=True, timeout=60)


def assert_usage_error(res: subprocess.CompletedProcess, *needles: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith("lossguard: error: "), res.stderr
    for n in needles:
        assert n in res.stderr, (n, res.stderr)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "train.csv"
    path.write_text("step,loss\n" + "".join(f"{i},{3 - 0.003 * i + 0.01 * (i % 7):.4f}\n" for i in range(1, 301)))
    return path


@pytest.mark.parametrize("verb", ["analyze", "report", "simulate"])
def test_html_onto_the_input_log_is_refused_and_the_log_kept(verb, log, tmp_path):
    before = digest(log)
    res = lossguard(verb, "train.csv", "--html", "./train.csv", cwd=tmp_path)
    assert_usage_error(res, "--html", "is the input log")
    assert digest(log) == before


def test_png_onto_a_file_lossguard_did_not_write_is_refused(log, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    res = lossguard("analyze", "train.csv", "--png", "notes.txt", cwd=tmp_path)
    assert_usage_error(res, "--png 'notes.txt' exists and is not a PNG image")
    assert notes.read_text() == "my notes\n"
    # A previous report is replaced, as a re-run expects.
    assert lossguard("report", "train.csv", "--html", "r.html", cwd=tmp_path).returncode == 0
    assert lossguard("report", "train.csv", "--html", "r.html", cwd=tmp_path).returncode == 0


def test_simulate_config_that_is_binary_is_a_clear_error(log, tmp_path):
    (tmp_path / "guard.toml").write_bytes(bytes(range(256)) * 4)
    res = lossguard("simulate", "train.csv", "--config", "guard.toml", cwd=tmp_path)
    assert_usage_error(res, "guard.toml", "not a text file")


@pytest.mark.parametrize("flags, needles", [
    (["--webhook", "not-a-url"], ["--webhook must be an http:// or https:// URL", "fix:"]),
    (["--on-incident", "no-such-command-lossguard-test --now"], ["--on-incident", "'no-such-command-lossguard-test'"]),
    (["--hook-attempts", "0"], ["--hook-attempts must be >= 1"]),
])
def test_watch_hook_flags_are_checked_at_start(flags, needles, log, tmp_path):
    # No --until-idle: a bad flag must stop the watch at once, not after the first incident.
    res = lossguard("watch", "train.csv", *flags, cwd=tmp_path)
    assert_usage_error(res, *needles)


def test_watch_stdin_says_it_follows_files(tmp_path):
    assert_usage_error(lossguard("watch", "-", cwd=tmp_path), "cannot read standard input", "analyze -")


def test_watch_bad_cell_names_the_line_not_a_missing_file(tmp_path):
    (tmp_path / "bad.csv").write_text("step,loss\n1,2.5\n2,abc\n3,2.4\n")
    res = lossguard("watch", "bad.csv", "--until-idle", "0.3", "--every", "0.1", cwd=tmp_path)
    assert_usage_error(res, "line 3", "'abc'")
    assert "no log file appeared" not in res.stderr
    assert res.stderr.count("fix:") == 1, res.stderr


def test_watch_metric_that_is_not_in_the_log_exits_2(log, tmp_path):
    res = lossguard("watch", "train.csv", "--metric", "nope", "--until-idle", "0.3", "--every", "0.1", cwd=tmp_path)
    assert_usage_error(res, "no metric 'nope'")


def test_half_written_last_line_is_warned_about_on_stderr_json_stays_clean(tmp_path):
    (tmp_path / "run.jsonl").write_text('{"step": 1, "loss": 2.5}\n{"step": 2, "loss": 2.4}\n{"step": 3, "lo')
    res = lossguard("analyze", "run.jsonl", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "lossguard: warning: the last line is incomplete" in res.stderr
    assert json.loads(res.stdout)["run"]["last_step"] == 2


def test_a_paste_of_overflow_lines_only_points_to_the_loss_scale(tmp_path):
    """DeepSpeed overflow lines have a loss scale but no loss: the error says which --metric to pass."""
    paste = Path(__file__).parent / "data" / "pasted" / "deepspeed_overflow_tqdm.log"
    assert_usage_error(lossguard("analyze", str(paste), cwd=tmp_path), "no training loss", "--metric loss_scale")
    judged = lossguard("analyze", str(paste), "--metric", "loss_scale", "--json", cwd=tmp_path)
    assert judged.returncode == 0, judged.stderr
    assert "loss_scale_collapse" in judged.stdout
