"""read_log(): format sniffing by content, directories and several paths as one run, real logs."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from lossguard.errors import LogFormatError, LossguardError, UnknownFormatError
from lossguard.io import available_formats, detect_format, read_log
from lossguard.metrics import GRAD_NORM, LOSS, LR


def write_csv(path: Path, steps, loss, *, time0: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "loss", "grad_norm", "lr"] + (["timestamp"] if time0 is not None else []))
        for i, s in enumerate(steps):
            w.writerow([s, loss(s), 0.3, 1e-4] + ([time0 + i] if time0 is not None else []))
    return path


def test_sniffs_content_not_names(tmp_path):
    a = tmp_path / "train.log"
    a.write_text("step,loss\n1,2.0\n2,1.9\n")
    b = tmp_path / "metrics.txt"
    b.write_text(json.dumps({"step": 1, "loss": 2.0}) + "\n")
    c = tmp_path / "state.json"
    c.write_text(json.dumps({"global_step": 5, "log_history": [{"loss": 2.0, "step": 5, "epoch": 0.1}]}, indent=2))
    d = tmp_path / "looks_like.csv"  # JSONL content under a .csv name
    d.write_text(json.dumps({"iteration": 3, "lm loss": 2.0}) + "\n")
    assert [detect_format(p) for p in (a, b, c, d)] == ["csv", "jsonl", "hf_trainer_state", "jsonl"]
    assert read_log(d).series[LOSS].steps.tolist() == [3]


def test_rolled_back_run_directory(tmp_path):
    """launch 1 logs steps 1..500; the run rolls back to 400 (launch 2: 401..700); then resumes (701..900).

    Known answers: segment kinds start/rollback/resume; launch 1's steps 401..500 are dead: 100 points
    per metric, 300 in all (loss, grad_norm, lr); the live loss is the launch-2 value from 401 on.
    """
    run = tmp_path / "run"
    write_csv(run / "launch_b.csv", range(401, 701), lambda s: 2.0, time0=2000.0)
    write_csv(run / "launch_a.csv", range(1, 501), lambda s: 3.0, time0=1000.0)
    write_csv(run / "launch_c.csv", range(701, 901), lambda s: 1.0, time0=3000.0)
    (run / "config.yaml").write_text("lr: 1e-4\nbetas: [0.9, 0.95]\n")  # not a log: skipped
    log = read_log(run)
    assert [Path(g.source).name for g in log.segments] == ["launch_a.csv", "launch_b.csv", "launch_c.csv"]
    assert [g.kind for g in log.segments] == ["start", "rollback", "resume"]
    assert log.segments[1].first_step == 401 and log.segments[1].superseded == 300
    s = log.summary()
    assert s["dead_points"] == 300 and s["rollbacks"] == 1 and s["resumes"] == 1
    assert all(s["metrics"][m]["dead_points"] == 100 for m in (LOSS, GRAD_NORM, LR))
    steps, values = log.live(LOSS)
    np.testing.assert_array_equal(steps, np.arange(1, 901))
    assert values[399] == 3.0 and values[400] == 2.0 and values[700] == 1.0
    assert log.metadata["skipped"] == [str(run / "config.yaml")]


def test_several_paths_ordered_by_first_step_without_times(tmp_path):
    b = write_csv(tmp_path / "b.csv", range(101, 201), lambda s: 1.0)
    a = write_csv(tmp_path / "a.csv", range(1, 151), lambda s: 2.0)
    log = read_log([b, a])
    assert [Path(g.source).name for g in log.segments] == ["a.csv", "b.csv"]
    assert log.segments[1].kind == "rollback" and log.summary()["metrics"][LOSS]["dead_points"] == 50


def test_mixed_formats_in_one_run(tmp_path):
    write_csv(tmp_path / "first.csv", range(1, 101), lambda s: 2.0)
    with open(tmp_path / "second.jsonl", "w") as f:
        for s in range(101, 201):
            f.write(json.dumps({"step": s, "loss": 1.0}) + "\n")
    log = read_log(tmp_path)
    assert log.format == "mixed" and [g.kind for g in log.segments] == ["start", "resume"]
    assert len(log.live(LOSS)[0]) == 200


def test_forced_format(tmp_path):
    p = tmp_path / "odd.dat"
    p.write_text("a;step;loss\nx;1;2.0\n")
    assert detect_format(p) == "csv"
    assert read_log(p, format="csv").series[LOSS].values.tolist() == [2.0]
    with pytest.raises(UnknownFormatError):
        read_log(p, format="parquet")


@pytest.mark.parametrize("content", [b"hello world\n", b"\x00\x01\x02binary", b"a b c\n1 2 3\n"])
def test_unknown_format(tmp_path, content):
    p = tmp_path / "mystery.bin"
    p.write_bytes(content)
    with pytest.raises(UnknownFormatError) as e:
        read_log(p)
    assert e.value.path == str(p) and "--format" in e.value.fix


def test_bad_paths(tmp_path):
    with pytest.raises(LossguardError, match="no such file"):
        read_log(tmp_path / "missing.csv")
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    with pytest.raises(LogFormatError, match="empty"):
        read_log(empty)
    with pytest.raises(LossguardError, match="holds no files"):
        (tmp_path / "nothing").mkdir()
        read_log(tmp_path / "nothing")
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.md").write_text("# nothing here\n")
    with pytest.raises(UnknownFormatError, match="none of the 1 files"):
        read_log(junk)


def test_registry_order():
    # the generic tabular readers after the specific ones, and the text grammar after them all
    assert available_formats()[-3:] == ["jsonl", "csv", "text"]
    assert {"hf_trainer_state", "wandb", "lightning"} <= set(available_formats())


# Known point counts from tests/data/real-logs/README.md ("Points: ...").
REAL = {
    "bigscience_tr11_176b_excerpts.csv": (34, 11),
    "dschat_rlhf_opt1p3b_ppo.csv": (477, 1),
    "megatron_deepseekv3_proxy_dev_h100.csv": (9537, 1),
    "megatron_gpt3_15b_dev_h100.csv": (10173, 1),
    "megatron_mixtral8x7b_v0p8_a100.csv": (4769, 1),
    "mng_adamw_baseline_124m.csv": (9536, 1),
    "mng_scaleup_1p5b_c0078066.csv": (15258, 1),
    "mng_soap_124m.csv": (6000, 1),
}
VAL_POINTS = {"mng_adamw_baseline_124m.csv": 76, "mng_scaleup_1p5b_c0078066.csv": 124, "mng_soap_124m.csv": 49}


def test_every_real_log_reads(real_logs):
    files = sorted(p.name for p in real_logs.glob("*.csv"))
    assert files == sorted(REAL), "a real log was added or removed: update REAL from the README"
    for name, (points, segments) in REAL.items():
        log = read_log(real_logs / name)
        assert log.format == "csv"
        assert len(log.series[LOSS]) == points, name
        assert len(log.segments) == segments, name
        if name in VAL_POINTS:
            assert len(log.series["val_loss"]) == VAL_POINTS[name], name


def test_real_log_known_values(real_logs):
    log = read_log(real_logs / "megatron_mixtral8x7b_v0p8_a100.csv")
    steps, loss = log.live(LOSS)
    assert (steps[0], steps[-1]) == (1, 23840)
    assert loss[steps == 2895][0] == pytest.approx(5.19, abs=0.01)  # the 2.0x spike in the README
    assert loss[-1] == pytest.approx(1.973, abs=1e-3)
    bloom = read_log(real_logs / "bigscience_tr11_176b_excerpts.csv")
    steps, grad = bloom.live(GRAD_NORM)
    assert grad[steps == 31219][0] == pytest.approx(960.351)
    # the 7 re-runs of 94768 from one checkpoint: the last one (TP1/PP72, loss 2.043) is the live one
    steps, loss = bloom.live(LOSS)
    assert loss[steps == 94768][0] == pytest.approx(2.0429)
    assert sum(g.kind == "rollback" for g in bloom.segments) == 6


def test_side_files_are_not_sniffed(tmp_path):
    """Lightning's hparams.yaml holds '{}', which a content sniffer takes for JSONL."""
    write_csv(tmp_path / "version_0" / "metrics.csv", range(1, 11), lambda s: 2.0)
    (tmp_path / "version_0" / "hparams.yaml").write_text("{}\n")
    log = read_log(tmp_path)
    assert log.metadata["skipped"] == [str(tmp_path / "version_0" / "hparams.yaml")]


def test_same_points_from_two_formats_are_read_once(tmp_path):
    write_csv(tmp_path / "a.csv", range(1, 51), lambda s: 3.0 - s / 100)
    with open(tmp_path / "b.jsonl", "w") as f:
        for s in range(1, 51):
            f.write(json.dumps({"step": s, "loss": 3.0 - s / 100}) + "\n")
    log = read_log(tmp_path)
    assert log.format in ("csv", "jsonl") and len(log.series[LOSS]) == 50
    assert len(log.metadata["duplicate_sources"]) == 1 and log.summary()["rollbacks"] == 0


def test_unrelated_runs_are_an_error_naming_them(tmp_path):
    write_csv(tmp_path / "a.csv", range(0, 50), lambda s: 3.0)
    with open(tmp_path / "b.jsonl", "w") as f:
        for s in range(0, 80):
            f.write(json.dumps({"step": s, "loss": 5.0}) + "\n")
    with pytest.raises(LossguardError, match="separate runs") as err:
        read_log(tmp_path)
    assert "a.csv" in str(err.value) and "b.jsonl" in str(err.value) and "--only" in str(err.value)
    assert read_log(tmp_path, only="*.jsonl").format == "jsonl"
    assert read_log(tmp_path, only=["a.*"]).format == "csv"
    with pytest.raises(LossguardError, match="no file matches"):
        read_log(tmp_path, only="*.parquet")


def test_cli_names_separate_runs_and_only_picks_one(tmp_path, capsys):
    from lossguard.cli import main

    write_csv(tmp_path / "a.csv", range(0, 50), lambda s: 3.0)
    with open(tmp_path / "b.jsonl", "w") as f:
        for s in range(0, 80):
            f.write(json.dumps({"step": s, "loss": 5.0}) + "\n")
    assert main(["info", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "separate runs" in err and "Traceback" not in err
    assert main(["info", str(tmp_path), "--only", "*.csv"]) == 0


def test_duplicate_source_keeps_its_events(tmp_path):
    """A guard's JSONL log beside the run's TensorBoard events: the points are read once, from the
    events, and the guard's decisions are kept."""
    tensorboardX = pytest.importorskip("tensorboardX")
    w = tensorboardX.SummaryWriter(str(tmp_path / "tb"))
    for s in range(1, 31):
        w.add_scalar("train/loss", 3.0 - s / 64, s)
    w.close()
    with open(tmp_path / "guard.jsonl", "w") as f:
        for s in range(1, 31):
            f.write(json.dumps({"step": s, "loss": 3.0 - s / 64}) + "\n")
            if s == 12:
                f.write(json.dumps({"step": 12, "event": "skip", "reason": "loss spike"}) + "\n")
    log = read_log(tmp_path)
    assert log.format == "tensorboard" and len(log.series[LOSS]) == 30
    assert log.metadata["duplicate_sources"] == [str(tmp_path / "guard.jsonl")]
    assert [e["event"] for e in log.events] == ["skip"]


def test_deterministic_resume_in_another_format_is_not_a_duplicate(tmp_path):
    """Same values where they overlap (a bitwise-exact resume), new steps after: one run, both read."""
    write_csv(tmp_path / "a.csv", range(1, 101), lambda s: 3.0 - s / 128)
    with open(tmp_path / "b.jsonl", "w") as f:
        for s in range(81, 201):
            f.write(json.dumps({"step": s, "loss": 3.0 - s / 128}) + "\n")
    log = read_log(tmp_path)
    assert "duplicate_sources" not in log.metadata
    assert log.live(LOSS)[0].tolist() == list(range(1, 201))
    assert [g.kind for g in log.segments] == ["start", "rollback"]


def test_the_fuller_copy_is_kept(tmp_path):
    """Events of only the last launch beside a CSV with the whole history: the CSV is kept."""
    tensorboardX = pytest.importorskip("tensorboardX")
    write_csv(tmp_path / "full.csv", range(1, 61), lambda s: 3.0 - s / 64)
    w = tensorboardX.SummaryWriter(str(tmp_path / "tb"))
    for s in range(41, 61):
        w.add_scalar("loss", 3.0 - s / 64, s)
    w.close()
    log = read_log(tmp_path)
    assert log.format == "csv" and log.live(LOSS)[0].tolist() == list(range(1, 61))
    assert len(log.metadata["duplicate_sources"]) == 1


def test_a_directory_of_unrelated_runs_of_one_format_is_an_error(real_logs, capsys):
    """The 8 real logs are 8 unrelated runs, all CSV: never one run with 13 "rollbacks"."""
    from lossguard.cli import main

    with pytest.raises(LossguardError, match="separate runs") as err:
        read_log(real_logs)
    message = str(err.value)
    assert all(name in message for name in REAL), "every file is named in its apparent run"
    assert "run 1:" in message and "run 2:" in message and "--only" in message
    assert main(["info", str(real_logs)]) == 2
    out = capsys.readouterr().err
    assert "separate runs" in out and "Traceback" not in out
    assert main(["info", str(real_logs), "--only", "mng_soap_124m.csv"]) == 0


def test_two_launches_from_scratch_in_one_format_are_separate_runs(tmp_path):
    write_csv(tmp_path / "seed1" / "metrics.csv", range(0, 60), lambda s: 3.0 - s / 100)
    write_csv(tmp_path / "seed2" / "metrics.csv", range(0, 40), lambda s: 3.1 - s / 90)
    with pytest.raises(LossguardError, match="2 separate runs") as err:
        read_log(tmp_path)
    assert "run 1: " + str(tmp_path / "seed1" / "metrics.csv") in str(err.value)
    assert "run 2: " + str(tmp_path / "seed2" / "metrics.csv") in str(err.value)
    assert "both start at step 0 with different loss values" in str(err.value)
    assert len(read_log(tmp_path, only="seed2/*").series[LOSS]) == 40


def test_two_copies_of_one_file_are_read_once_and_said(tmp_path, real_logs):
    import shutil

    for name in ("a.csv", "b.csv"):
        shutil.copy(real_logs / "mng_soap_124m.csv", tmp_path / name)
    log = read_log(tmp_path)
    alone = read_log(real_logs / "mng_soap_124m.csv")
    assert len(log.series[LOSS]) == len(alone.series[LOSS]) == 6000
    s = log.summary()
    assert s["dead_points"] == 0 and s["rollbacks"] == 0 and len(log.segments) == 1
    assert log.metadata["duplicate_sources"] == [str(tmp_path / "b.csv")]
    assert any(str(tmp_path / "b.csv") in w and "copy" in w for w in log.metadata["warnings"])


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_resume_split_over_two_files_of_one_format_is_one_run(tmp_path, fmt):
    """Launch 1 logs 0..99 and crashes; launch 2 resumes from the checkpoint at 80 with other values
    (a non-deterministic resume): one run, a rollback, 20 dead points per metric."""
    def loss(s, launch):
        return 3.0 - s / 100 + (0.01 if launch == 2 else 0.0)

    for launch, steps in ((1, range(0, 100)), (2, range(80, 200))):
        path = tmp_path / f"launch{launch}.{fmt}"
        if fmt == "csv":
            write_csv(path, steps, lambda s: loss(s, launch))
        else:
            path.write_text("".join(json.dumps({"step": s, "loss": loss(s, launch)}) + "\n" for s in steps))
    log = read_log(tmp_path)
    assert [g.kind for g in log.segments] == ["start", "rollback"]
    assert log.summary()["metrics"][LOSS]["dead_points"] == 20
    steps, values = log.live(LOSS)
    assert steps.tolist() == list(range(0, 200)) and values[80] == pytest.approx(loss(80, 2))
    assert "duplicate_sources" not in log.metadata
