"""analyze() end to end on an in-memory run, and the versioned JSON document."""
from __future__ import annotations

import json

import numpy as np
import pytest

from lossguard.analysis import SCHEMA_VERSION, AnalyzeConfig, analyze
from lossguard.errors import LossguardError
from lossguard.runlog import RunLogBuilder


def _run():
    rng = np.random.default_rng(0)
    t = np.arange(1, 6001)
    loss = 2 + 8 * t ** -0.4 * (1 + rng.normal(0, 0.005, len(t)))
    loss[t == 3000] *= 1.8                 # a one-step spike
    loss[t == 4500] = np.nan               # a NaN
    gn = 1 + rng.normal(0, 0.05, len(t))
    gn[t == 2000] = 40.0                 # a grad-norm spike the loss did not follow
    b = RunLogBuilder("test")
    b.start_segment("mem://run")
    b.add("loss", t, loss)
    b.add("grad_norm", t, gn)
    b.add_event({"step": 4500, "event": "skip", "reason": "non-finite loss"})
    return b.build()


def test_analyze_finds_known_incidents_and_plans():
    a = analyze(_run(), checkpoints=[1000, 2000, 4000])
    got = {(i.kind.value, i.onset) for i in a.incidents}
    assert ("spike_fast_recovery", 3000) in got
    assert ("non_finite", 4500) in got
    assert ("grad_norm_spike", 2000) in got
    assert len(a.plans) == len(a.incidents)
    nan_plan = a.plans[[i.kind.value for i in a.incidents].index("non_finite")]
    # One NaN step: the guard's policy withholds that update and goes on (issue 19: the plan is the
    # policy's decision; version 2 planned a rollback to checkpoint 4000 here).
    assert nan_plan.action == "watch" and nan_plan.skipped_steps == [4500] and nan_plan.rollback_to_step is None
    assert a.guard_actions == [{"step": 4500, "event": "skip", "reason": "non-finite loss"}]


def test_to_dict_is_strict_versioned_json():
    doc = analyze(_run()).to_dict()
    text = json.dumps(doc, allow_nan=False)  # raises on NaN/Inf
    back = json.loads(text)
    assert back["schema_version"] == SCHEMA_VERSION
    assert set(back) >= {"schema_version", "lossguard_version", "run", "metric", "log_interval", "summary",
                         "incidents", "plans", "guard_actions", "notes", "settings", "checkpoints"}
    inc = back["incidents"][0]
    assert set(inc) >= {"kind", "metric", "onset", "peak", "end", "baseline", "peak_value", "magnitude",
                        "magnitude_sigma", "recovery_steps", "streams", "severity", "evidence", "details"}
    assert back["summary"]["incidents"] == len(back["incidents"])
    assert back["settings"]["analyze"]["fast_steps"] == 100


def test_missing_metric_is_a_clear_error():
    with pytest.raises(LossguardError, match="no metric 'val_loss'"):
        analyze(_run(), settings=AnalyzeConfig(metric="val_loss"))
    b = RunLogBuilder("test")
    b.start_segment("mem://x")
    b.add("lr", [1, 2, 3], [0.1, 0.1, 0.1])
    with pytest.raises(LossguardError, match="no training loss"):
        analyze(b.build())


def test_schema_document_covers_every_field_and_kind():
    from pathlib import Path

    from lossguard.classify.incident import IncidentKind

    text = (Path(__file__).resolve().parents[1] / "docs" / "analysis-json.md").read_text()
    doc = analyze(_run()).to_dict()
    for key in doc:
        assert f"`{key}`" in text, key
    for key in doc["incidents"][0]:
        assert f"`{key}`" in text, key
    for key in doc["plans"][0]:
        assert f"`{key}`" in text, key
    for kind in IncidentKind:
        assert f"`{kind.value}`" in text, kind
