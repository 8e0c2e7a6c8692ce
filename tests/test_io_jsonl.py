"""JSONL reader: varying keys, events, rollback/resume segments, non-finite values, bad lines.

Fixtures are written with ``json.dumps`` one record per line, the way training scripts (and
lossguard's guard) write JSONL; ``json.dumps`` writes ``NaN``/``Infinity`` for non-finite floats.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from lossguard.errors import LogFormatError
from lossguard.io import jsonl
from lossguard.metrics import GRAD_NORM, LOSS, LR, VAL_LOSS
from lossguard.stitch import stitch

FAST = pytest.mark.parametrize("fast", [True, False], ids=["pyarrow", "stdlib"])


def write(path: Path, records: list[dict]) -> Path:
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return path


@FAST
def test_keys_differ_line_to_line(tmp_path, fast):
    recs = []
    for s in range(1, 101):
        r = {"step": s, "train/loss": 5.0 - s / 50}
        if s % 10 == 0:
            r["grad_norm"] = 0.1 * s
        if s % 25 == 0:
            recs.append(r)
            r = {"step": s, "eval/loss": 4.0}
        recs.append(r)
    p = write(tmp_path / "m.jsonl", recs)
    log = jsonl.read(p, fast=fast)
    assert len(log.series[LOSS]) == 100
    np.testing.assert_array_equal(log.series[GRAD_NORM].steps, np.arange(10, 101, 10))
    np.testing.assert_array_equal(log.series[VAL_LOSS].steps, [25, 50, 75, 100])
    np.testing.assert_allclose(log.series[LOSS].values, 5.0 - np.arange(1, 101) / 50)


@FAST
def test_guard_events_and_rollback_segment(tmp_path, fast):
    recs = [{"step": s, "loss": 2.0, "lr": 1e-3, "time": 1000.0 + s} for s in range(1, 301)]
    recs.insert(120, {"step": 120, "event": "skip", "reason": "loss outlier"})
    recs.append({"step": 300, "event": "rollback", "to_step": 200})
    recs += [{"step": s, "loss": 1.5, "lr": 5e-4, "time": 2000.0 + s} for s in range(201, 401)]
    p = write(tmp_path / "guard.jsonl", recs)
    log = stitch(jsonl.read(p, fast=fast))
    assert [e["event"] for e in log.events] == ["skip", "rollback"]
    assert log.events[1]["to_step"] == 200
    assert [g.kind for g in log.segments] == ["start", "rollback"]
    assert log.segments[1].first_step == 201 and log.segments[1].start_time == 2201.0
    assert log.segments[0].start_time == 1001.0
    assert log.segments[1].note == "rollback event at step 300"
    # steps 201..300 of the first launch are dead for loss and lr: 2 x 100 points
    assert log.segments[1].superseded == 200
    assert "time" not in log.series and "to_step" not in log.series
    steps, values = log.live(LOSS)
    np.testing.assert_array_equal(steps, np.arange(1, 401))
    assert values[199] == 2.0 and values[200] == 1.5


def test_shadow_rollback_is_not_a_segment(tmp_path):
    # A guard in shadow mode logs the rollback it would have made; the run itself went on.
    recs = [{"step": s, "loss": 2.0} for s in range(1, 101)]
    recs.insert(60, {"step": 60, "event": "rollback", "shadow": True, "would_roll_back_to": 20})
    log = stitch(jsonl.read(write(tmp_path / "shadow.jsonl", recs)))
    assert len(log.segments) == 1 and log.summary()["dead_points"] == 0
    assert [e["event"] for e in log.events] == ["rollback"]


@FAST
def test_non_finite_and_null(tmp_path, fast):
    p = write(tmp_path / "m.jsonl", [{"step": 1, "loss": 1.0}, {"step": 2, "loss": math.nan},
                                     {"step": 3, "loss": math.inf}, {"step": 4, "loss": None, "lr": 0.1},
                                     {"step": 5, "loss": "2.5"}])
    log = jsonl.read(p, fast=fast)
    v = log.series[LOSS].values
    np.testing.assert_array_equal(log.series[LOSS].steps, [1, 2, 3, 5])
    assert math.isnan(v[1]) and v[2] == math.inf and v[3] == 2.5


@FAST
@pytest.mark.parametrize("body, where, what", [
    ('{"step": 1, "loss": 2}\n{"step": 2, "loss": 2\n', "line 2", "not valid JSON"),
    ('{"step": 1, "loss": 2}\n[1, 2]\n', "line 2", "a JSON list"),
    ('{"step": 1, "loss": 2}\n{"step": 2, "loss": "high"}\n', "line 2", "non-numeric value 'high'"),
    ('{"step": 1, "loss": 2}\n{"step": 1, "loss": 3}\n', "line 2", "duplicate step 1"),
    ('{"step": 1, "loss": 2}\n\n{"step": 0, "loss": 3}\n', "line 3", "steps go backwards"),
    ('{"loss": 2}\n{"loss": 3}\n', None, "no step key"),
    ('{"step": 1, "loss": 2}\n{"loss": 3}\n', "line 2", "no 'step'"),
])
def test_bad_input_names_the_line(tmp_path, fast, body, where, what):
    p = tmp_path / "bad.jsonl"
    p.write_text(body)
    with pytest.raises(LogFormatError) as e:
        jsonl.read(p, fast=fast)
    assert e.value.where == where and what in e.value.what and e.value.fix


@pytest.mark.parametrize("chunk", [1 << 20, 100], ids=["one-chunk", "many-chunks"])
def test_paths_agree(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr("lossguard.io._chunks.CHUNK_BYTES", chunk)  # the fast path parses in chunks
    rng = np.random.default_rng(3)
    recs = [{"step": i, "loss": float(rng.normal()), **({"grad_norm": float(rng.random())} if i % 3 else {})}
            for i in range(3000)]
    recs[2000:] = [{**r, "step": r["step"] - 500} for r in recs[2000:]]
    recs.insert(2000, {"step": 1999, "event": "rollback", "to_step": 1500})
    recs.insert(500, {"step": 499, "event": "skip"})
    p = write(tmp_path / "m.jsonl", recs)
    a, b = jsonl.read(p, fast=True), jsonl.read(p, fast=False)
    assert set(a.series) == set(b.series) == {LOSS, GRAD_NORM}
    for name in a.series:
        np.testing.assert_array_equal(a.series[name].steps, b.series[name].steps)
        np.testing.assert_array_equal(a.series[name].values, b.series[name].values)
    assert LR not in a.series
    assert [e["event"] for e in a.events] == [e["event"] for e in b.events] == ["skip", "rollback"]
    assert [g.first_step for g in a.segments] == [g.first_step for g in b.segments] == [0, 1500]
    assert a.segments[1].note == b.segments[1].note == "rollback event at step 1999"


def test_sniff(tmp_path):
    p = tmp_path / "x.log"
    assert jsonl.sniff(p, b'{"step": 1, "loss": 2.0}\n{"step": 2')
    assert not jsonl.sniff(p, b'{\n  "log_history": []\n}')
    assert not jsonl.sniff(p, b"step,loss\n")
