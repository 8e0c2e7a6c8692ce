"""``lossguard info``: tables a person reads, ``--json`` shape, exit code 2 and no traceback on bad input."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lossguard.cli import main

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "megatron_mixtral8x7b_v0p8_a100.csv"

BAD = {
    "empty.csv": b"",
    "non_numeric.csv": b"step,loss\n1,2.0\n2,two\n",
    "no_step.csv": b"loss,lr\n2.0,0.1\n",
    "backwards.csv": b"step,loss\n1,2.0\n5,2.0\n3,2.0\n",
    "duplicate.jsonl": b'{"step": 1, "loss": 2}\n{"step": 1, "loss": 2}\n',
    "cut_mid_file.jsonl": b'{"step": 1, "loss": 2}\n{"step": 2, "lo\n{"step": 3, "loss": 2}\n',
    "unknown.bin": b"\x89PNG\r\n\x1a\n\x00\x00",
    "state.json": b'{"log_history": [{"step": 1, "loss": "x"}]}',
    "wandb.csv": b'"Step","a - loss","b - loss"\n1,2,3\n',
}


def test_info_prints_a_readable_table(capsys):
    assert main(["info", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[:2]
    assert first[0] == EXAMPLE.name
    assert "steps 1 - 23,840" in first[1] and "1 segment" in first[1] and "0 rollbacks" in first[1]
    assert "loss" in out and "4,769" in out and "1.973" in out


def test_info_json_shape(capsys, tmp_path):
    a = tmp_path / "a.csv"
    a.write_text("step,loss\n" + "".join(f"{s},{'nan' if s == 3 else 2.0}\n" for s in range(1, 11)))
    b = tmp_path / "b.csv"
    b.write_text("step,loss\n" + "".join(f"{s},1.0\n" for s in range(6, 16)))
    assert main(["info", "--json", str(a), str(b)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "csv" and doc["stitched"] is True
    assert doc["rollbacks"] == 1 and doc["dead_points"] == 5
    assert doc["metrics"]["loss"] == {"points": 20, "live_points": 15, "dead_points": 5, "first_step": 1,
                                      "last_step": 15, "nan": 1, "inf": 0, "first_nonfinite_step": 3}
    assert [g["kind"] for g in doc["segments"]] == ["start", "rollback"]
    assert {"sources", "first_step", "last_step", "resumes", "events", "metadata"} <= set(doc)


def test_info_plain_text_without_rich(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "rich", None)  # import rich -> ImportError
    monkeypatch.setitem(sys.modules, "rich.console", None)
    assert main(["info", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "metric" in out and "loss" in out and "start" in out


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_exits_2_with_a_message(tmp_path, capsys, name):
    p = tmp_path / name
    p.write_bytes(BAD[name])
    assert main(["info", str(p)]) == 2
    err = capsys.readouterr().err
    assert "lossguard: error: " in err and str(p) in err and "fix:" in err
    assert "Traceback" not in err


def test_missing_and_unreadable_paths(tmp_path, capsys):
    assert main(["info", str(tmp_path / "nope.csv")]) == 2
    assert "no such file" in capsys.readouterr().err
    if os.geteuid() != 0:  # root reads anything
        p = tmp_path / "locked.csv"
        p.write_text("step,loss\n1,2\n")
        p.chmod(0)
        assert main(["info", str(p)]) == 2
        assert "cannot read" in capsys.readouterr().err


def test_unknown_forced_format(tmp_path, capsys):
    assert main(["info", "--format", "parquet", str(EXAMPLE)]) == 2
    assert "unknown format 'parquet'" in capsys.readouterr().err


def test_console_script_end_to_end(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("step,loss\n1,2.0\n1,2.1\n")
    exe = Path(sys.executable).with_name("lossguard")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "lossguard"]
    ok = subprocess.run([*cmd, "info", str(EXAMPLE)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "loss" in ok.stdout
    res = subprocess.run([*cmd, "info", str(bad)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "duplicate step 1" in res.stderr and "line 3" in res.stderr
    assert "Traceback" not in res.stderr


def _cli() -> list[str]:
    exe = Path(sys.executable).with_name("lossguard")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "lossguard"]


@pytest.mark.parametrize("name,data", [
    ("run.jsonl", b'{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.9}\n{"step": 3, "lo'),
    ("run.csv", b"step,loss,lr\n1,2.0,0.1\n2,1.9,0.1\n3,1."),
])
def test_half_written_last_line_is_read_up_to_it_with_a_warning(tmp_path, capsys, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    assert main(["info", "--json", str(p)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["metrics"]["loss"]["points"] == 2 and doc["last_step"] == 2
    assert any("last line is incomplete" in w for w in doc["metadata"]["warnings"])


def test_lone_surrogate_key_prints_and_exits_0(tmp_path):
    p = tmp_path / "sur.jsonl"
    p.write_bytes(b'{"step": 1, "\\udc80loss": 2.0, "loss": 1.0}\n{"step": 2, "\\udc80loss": 2.1, "loss": 1.0}\n')
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}  # strict, as a terminal's stdout is
    res = subprocess.run([*_cli(), "info", str(p)], capture_output=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr.decode()
    assert b"\\udc80loss" in res.stdout and b"Traceback" not in res.stderr
    res = subprocess.run([*_cli(), "analyze", str(p)], capture_output=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr.decode()


def test_fifo_without_writer_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    res = subprocess.run([*_cli(), "info", str(fifo)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "FIFO" in res.stderr and "lossguard analyze -" in res.stderr and "Traceback" not in res.stderr
