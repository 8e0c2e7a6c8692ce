"""``lossguard demo`` end to end, through the real CLI in a subprocess: a real tiny GPT really trained
into a bad-data pocket, unguarded and guarded, logs read back and analysed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from lossguard.analysis import analyze  # noqa: E402
from lossguard.demo.run import MARKER, DemoConfig, prepare_out  # noqa: E402
from lossguard.errors import ConfigError  # noqa: E402
from lossguard.io import read_log  # noqa: E402
from lossguard.metrics import LOSS, VAL_LOSS  # noqa: E402

SHORT_STEPS = 120  # the session fixture short_demo's steps (conftest.py): the pocket moves to 60, length 12


def _demo(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "lossguard", "demo", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_short_demo_exits_0_and_writes_logs_reports_and_summary(short_demo):
    out, proc = short_demo
    assert proc.returncode == 0, proc.stderr
    for name in ("unguarded.jsonl", "guarded.jsonl", "unguarded.html", "guarded.html", "index.html",
                 "summary.json", MARKER):
        assert (out / name).is_file(), name
    summary = json.loads(proc.stdout)
    assert summary == json.loads((out / "summary.json").read_text())
    assert summary["scenario"]["pocket"] == {"start": 60, "length": 12, "kind": "random_bytes"}
    assert "guarded: step" in proc.stderr  # plain progress lines when stderr is not a terminal
    index = (out / "index.html").read_text()
    assert 'href="guarded.html"' in index and 'href="unguarded.html"' in index
    assert "rolled back at step" in index


def test_unguarded_log_shows_the_pocket_and_the_analyser_finds_it(short_demo):
    out, _ = short_demo
    recs = [r for r in _records(out / "unguarded.jsonl") if "loss" in r]
    loss = np.array([r["loss"] for r in recs])
    assert [r["step"] for r in recs] == list(range(SHORT_STEPS))
    before = np.median(loss[50:60])
    assert loss[60:72].max() > 1.5 * before  # garbage bytes: a real loss spike, not a written number
    analysis = analyze(read_log(out / "unguarded.jsonl"))
    hits = [i for i in analysis.incidents if i.metric == LOSS and 60 <= i.peak < 72]
    assert hits, analysis.incidents
    assert VAL_LOSS in read_log(out / "unguarded.jsonl").series


def test_guarded_log_holds_the_guards_decisions_and_stitches(short_demo):
    out, proc = short_demo
    recs = _records(out / "guarded.jsonl")
    events = [r for r in recs if "event" in r]
    skips = [e for e in events if e["event"] == "skip"]
    (rb,) = [e for e in events if e["event"] == "rollback"]
    assert skips and all(60 <= e["step"] < 72 for e in skips)
    assert rb["to_step"] <= 60 - 12  # >= rollback_distance (12 = steps // 10) before the onset
    a, b = rb["skip_batches"]
    assert a == 60 and b >= 72  # the whole pocket is skipped
    log = read_log(out / "guarded.jsonl")
    assert len(log.segments) == 2 and log.segments[1].first_step == rb["to_step"]
    analysis = analyze(log)
    assert {"skip", "rollback"} <= {g["event"] for g in analysis.guard_actions}
    # Up to the first bad step both runs are the same computation, bit for bit.
    unguarded = [r["loss"] for r in _records(out / "unguarded.jsonl") if "loss" in r][:60]
    guarded = [r["loss"] for r in recs if "loss" in r and "event" not in r][:60]
    assert guarded == unguarded
    summary = json.loads(proc.stdout)["runs"]
    assert summary["guarded"]["steps"] == SHORT_STEPS and not summary["guarded"]["halted"]
    assert summary["guarded"]["steps_lost"] == rb["step"] + 1 - rb["to_step"]
    assert summary["guarded"]["final_val_loss"] < summary["unguarded"]["final_val_loss"]


def test_out_refuses_a_foreign_non_empty_directory(tmp_path, capsys):
    """The command's own entry point, in this process (the error comes before any training; the
    subprocess runs above cover the real process)."""
    from lossguard.cli import main

    mine = tmp_path / "notes.txt"
    mine.write_text("keep me")
    assert main(["demo", "--out", str(tmp_path), "--steps", "20"]) == 2
    err = capsys.readouterr().err
    assert "not a previous `lossguard demo` output" in err and "Traceback" not in err
    assert mine.read_text() == "keep me"


def test_out_replaces_only_a_previous_demo_output(tmp_path):
    out = prepare_out(tmp_path / "d")
    (out / "guarded.jsonl").write_text("old\n")
    (out / "ckpt").mkdir()
    prepare_out(out)  # a previous demo's output: cleared
    assert sorted(p.name for p in out.iterdir()) == [MARKER]
    (out / "mine.txt").write_text("x")
    with pytest.raises(ConfigError, match="did not write"):
        prepare_out(out)
    assert (out / "mine.txt").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        prepare_out(tmp_path / "file")


def test_config_validation_and_short_scenarios():
    with pytest.raises(ConfigError, match="scenario") as exc:
        DemoConfig(scenario="clean", steps=5, seed=-1)
    assert "steps" in str(exc.value) and "seed" in str(exc.value)  # every problem at once
    sc = DemoConfig(steps=100).scenario_obj()
    assert sc.steps == 100 and sc.pocket.start == 50 and sc.pocket.start + sc.pocket.length < 100
    high = DemoConfig(scenario="high_lr")
    clean = high.clean_obj()
    assert clean.pocket is None and clean.lr_jumps == () and clean.steps == high.scenario_obj().steps
    assert any(clean.lr_at(s) < high.scenario_obj().lr_at(s) for s in range(clean.steps))
    proc = _demo("--scenario", "clean", timeout=60)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


@pytest.mark.slow
def test_full_default_demo_within_3_minutes_and_the_guard_wins(tmp_path):
    t0 = time.perf_counter()
    proc = _demo("--out", str(tmp_path / "out"), "--json", timeout=900)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr
    runs = json.loads(proc.stdout)["runs"]
    assert wall < 180, f"demo took {wall:.0f} s"
    assert runs["guarded"]["final_val_loss"] < runs["unguarded"]["final_val_loss"]
    assert abs(runs["guarded"]["vs_clean"]) < 0.02
    assert runs["unguarded"]["vs_clean"] > 0.02


def test_a_nan_run_stops_unguarded_and_the_guard_halts_with_a_diagnosis(tmp_path):
    # lr 1e30: step 0's update blows the weights up, every later loss is NaN (a real NaN, not injected).
    from lossguard.demo.scenarios import SCENARIOS
    from lossguard.demo.train import demo_guard_config, train

    torch.set_num_threads(1)
    sc = SCENARIOS["clean"].with_(steps=30, lr=1e30, warmup=0, eval_every=10, eval_batches=1,
                                  model=dict(n_layer=1, n_embd=16, n_head=2), batch_size=4, seq_len=16)
    u = train(sc, guarded=False, log_path=tmp_path / "u.jsonl")
    assert u.diverged and u.diverged_at == 1 and u.to_dict()["final_val_loss"] is None
    losses = [r["loss"] for r in _records(tmp_path / "u.jsonl") if "loss" in r]
    assert len(losses) == 2 and np.isfinite(losses[0]) and np.isnan(losses[1])
    g = train(sc, guarded=True, log_path=tmp_path / "g.jsonl", ckpt_dir=tmp_path / "ck",
              guard_config=demo_guard_config(sc, grad_norm=None))
    assert g.halted and len(g.rollbacks) == 3 and g.skipped_steps[:3] == [1, 2, 3]
    halt = [r for r in _records(tmp_path / "g.jsonl") if r.get("event") == "halt"]
    assert len(halt) == 1 and Path(halt[0]["diagnosis"]).is_file()
    assert "rollback budget spent" in g.diagnosis
