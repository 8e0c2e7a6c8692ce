"""The recovery core: one definition of severity, action, skip range, recipe, checkpoint choice,
episode and ledger -- and the ledger's file, which survives rollbacks and restarts."""
from __future__ import annotations

import json

import pytest

from lossguard.errors import ConfigError, LossguardError
from lossguard.recovery import (LEDGER_FILE, Action, Episode, LrCut, RunLedger, Severity, SkipRange,
                                choose_checkpoint)


def test_severity_has_one_ordering_and_reads_strings():
    assert Severity.INFO < Severity.WARNING < Severity.CRITICAL
    assert Severity.worst(["warning", "critical", "info"]) is Severity.CRITICAL and Severity.worst([]) is None
    assert Severity("warning") >= "info" and str(Severity.CRITICAL) == "critical"


def test_action_values_are_the_log_and_plan_words():
    assert [a.value for a in Action if a.changes_future] == ["rollback", "lr_cut", "loss_scale_reset", "halt"]
    assert str(Action.HALT) == "halt" and Action("skip") is Action.SKIP


def test_skip_range_is_half_open_and_chains():
    r = SkipRange(start=10, stop=15)
    assert 10 in r and 14 in r and 15 not in r and len(r) == 5 and r.to_json() == [10, 15]
    assert SkipRange.from_json([10, 15]) == r
    from lossguard.recovery.skip_range import skip_to
    assert skip_to([r, SkipRange(start=15, stop=20)], 12) == 20 and skip_to([r], 15) is None
    with pytest.raises(ConfigError, match="start <= stop"):
        SkipRange(start=5, stop=4)


def test_choose_checkpoint_is_the_newest_at_least_the_distance_before_the_onset():
    assert choose_checkpoint(500, [0, 100, 300, 400, 450], 100) == 400
    assert choose_checkpoint(500, [450], 100) is None          # too close: the damage may be in it
    assert choose_checkpoint(50, [0, 40], 100) == 0             # clamped at 0: early episodes go to step 0
    assert choose_checkpoint(50, [10], 100) is None


def test_episode_groups_bad_steps_and_owns_its_skip_range():
    ep = Episode.open(100, 1100)
    ep.add(103, 1103)
    assert not ep.is_over(123, 20) and ep.is_over(124, 20)
    assert ep.needs_rollback(2) and not ep.needs_rollback(3)
    assert ep.skip_range(50) == SkipRange(start=1100, stop=1154)
    assert Episode.from_dict(json.loads(json.dumps(ep.to_dict()))) == ep


def test_ledger_file_round_trip_is_atomic_and_strict(tmp_path):
    path = tmp_path / LEDGER_FILE
    led = RunLedger.open(path)
    assert led.path == path and not path.exists()
    led.rollbacks, led.skips = 1, 4
    led.skip_ranges.append(SkipRange(start=300, stop=525))
    led.set_lr_cut(LrCut(start_step=200, until_step=400, factor=0.5, cause="rollbacks"))
    led.set_lr_cut(LrCut(start_step=250, until_step=None, factor=0.1, cause="recurrence"))
    led.note({"step": 304, "event": "rollback", "loss": float("nan"), "to_step": 200})
    assert path.exists() and not list(tmp_path.glob(".ledger-*"))   # temp file renamed away
    doc = json.loads(path.read_text())
    assert doc["format"] == "lossguard-ledger" and doc["history"][0]["loss"] is None
    back = RunLedger.open(path)
    assert back == led and back.lr_factor(300) == pytest.approx(0.05) and back.lr_factor(400) == 0.1
    assert back.skip_to(310) == 525


def test_damaged_or_foreign_ledger_is_a_clear_error(tmp_path):
    p = tmp_path / LEDGER_FILE
    p.write_text("{not json")
    with pytest.raises(LossguardError, match="not valid JSON"):
        RunLedger.load(p)
    p.write_text('{"format": "something-else"}')
    with pytest.raises(LossguardError, match="not a lossguard run ledger"):
        RunLedger.load(p)
