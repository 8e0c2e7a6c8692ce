"""`lossguard analyze`: terminal summary, --json, --fail-on exit codes, --checkpoints, clear errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

from lossguard.cli import main
from lossguard.analysis import SCHEMA_VERSION
from lossguard.classify.incident import IncidentKind
from lossguard.cli.analyze import _writer, parse_fail_on
from lossguard.errors import LossguardError


@pytest.fixture()
def spiky_csv(tmp_path):
    rng = np.random.default_rng(0)
    t = np.arange(1, 3001)
    loss = 2 + 8 * t ** -0.4 * (1 + rng.normal(0, 0.004, len(t)))
    loss[t >= 2000] *= np.where(t[t >= 2000] < 2400, 1 + 1.2 * np.exp(-(t[t >= 2000] - 2000) / 60.0), 1.0)
    path = tmp_path / "train.csv"
    with open(path, "w") as f:
        f.write("step,loss\n")
        for s, v in zip(t, loss):
            f.write(f"{s},{v:.6f}\n")
    return path


def test_text_summary_shows_incident_plan_and_plot(spiky_csv, capsys):
    assert main(["analyze", str(spiky_csv)]) == 0
    out = capsys.readouterr().out
    assert "spike_slow_recovery" in out and "onset 2000" in out
    assert "UNHEALTHY:" in out and "Needs action (1):" in out
    assert "plan: rollback" in out and "skip batches" in out
    assert "|" in out and "step 1" in out  # the plot frame


def test_json_and_fail_on(spiky_csv, capsys):
    assert main(["analyze", str(spiky_csv), "--json", "--fail-on", "spike_slow_recovery"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == SCHEMA_VERSION
    assert doc["incidents"][0]["kind"] == "spike_slow_recovery"
    assert main(["analyze", str(spiky_csv), "--json", "--fail-on", "divergence,non_finite"]) == 0
    capsys.readouterr()
    assert main(["analyze", str(spiky_csv), "--json", "--fail-on", "warning"]) == 1


def test_checkpoints_directory(spiky_csv, tmp_path, capsys):
    ck = tmp_path / "ckpts"
    for s in (1000, 1500, 1950):
        (ck / f"checkpoint-{s}").mkdir(parents=True)
    assert main(["analyze", str(spiky_csv), "--json", "--checkpoints", str(ck)]) == 0
    doc = json.loads(capsys.readouterr().out)
    plan = doc["plans"][0]
    assert plan["rollback_to_step"] == 1500 and plan["checkpoint_exists"] is True
    assert doc["checkpoints"] == [1000, 1500, 1950]


def test_bad_input_exits_2_without_traceback(spiky_csv, capsys):
    assert main(["analyze", str(spiky_csv), "--fail-on", "spikey"]) == 2
    err = capsys.readouterr().err
    assert "unknown kind" in err and "Traceback" not in err
    assert main(["analyze", str(spiky_csv), "--metric", "nope"]) == 2
    assert "no metric 'nope'" in capsys.readouterr().err
    assert main(["analyze", str(spiky_csv), "--checkpoints", "a,b"]) == 2


def test_fail_on_parsing():
    kinds, sev = parse_fail_on("any,critical")
    assert kinds == set(IncidentKind) and sev == "critical"
    with pytest.raises(LossguardError):
        parse_fail_on("nonsense")


def test_missing_report_writer_is_a_clear_error():
    with pytest.raises(LossguardError, match="not available"):
        _writer("no_such_writer", "write", "FOO")
