"""Recovery plans are the guard's policy's decisions, replayed (issue 19): same action, step and words
as ``simulate``; checkpoint rule, recipe, whole-log findings, filing under incidents, checkpoint parsing."""
from __future__ import annotations

import numpy as np
import pytest

from lossguard.analysis import analyze
from lossguard.classify.incident import Incident, IncidentKind as K
from lossguard.errors import ConfigError, LossguardError
from lossguard.io import read_log
from lossguard.plan import PlanConfig, make_plans, parse_checkpoints
from lossguard.recovery import RecoveryRecipe
from lossguard.simulate import simulate


def _csv(tmp_path, *, spikes=(), nan=(), n=3000, seed=0):
    """A power-law loss curve with 1% noise; ``spikes``: (step, [factors...]) multiplied in."""
    rng = np.random.default_rng(seed)
    s = np.arange(n)
    loss = (3.0 * (1 + s / 200) ** -0.3 + 0.5) * (1 + 0.01 * rng.standard_normal(n))
    for at, factors in spikes:
        loss[at:at + len(factors)] *= factors
    loss[list(nan)] = np.nan
    path = tmp_path / "run.csv"
    path.write_text("step,loss\n" + "".join(f"{i},{float(v)!r}\n" for i, v in enumerate(loss)))
    return read_log(path)


def test_the_issue_example_analyze_and_simulate_name_the_same_action_in_the_same_words(tmp_path):
    """A 4-step 2.2x spike at 1500, back on trend 3 steps later: the plan is the policy's decision."""
    log = _csv(tmp_path, spikes=[(1500, [2.2, 2.0, 1.6, 1.2])])
    a = analyze(log)
    sim = simulate(log)
    (rb,) = sim.of("rollback")
    heavy = [p for p in a.plans if p.step is not None]
    assert len(heavy) == 1
    p = heavy[0]
    assert (p.action, p.step, p.rollback_to_step) == ("rollback", rb["step"], rb["to_step"])
    assert p.skip_batches.to_json() == rb["skip_batches"]
    assert p.reasons == rb["reasons"]                      # word for word
    assert a.incidents[p.incident].onset == 1500 and not p.checkpoint_exists


def test_known_checkpoints_pick_the_newest_at_least_100_steps_before_onset_or_halt(tmp_path):
    log = _csv(tmp_path, spikes=[(1500, [2.2, 2.0, 1.6, 1.2])])
    (p,) = [p for p in analyze(log, checkpoints=[1000, 1380, 1450, 2000]).plans if p.step is not None]
    assert p.action == "rollback" and p.rollback_to_step == 1380 and p.checkpoint_exists
    (p,) = [p for p in analyze(log, checkpoints=[1450, 2000]).plans if p.step is not None]
    assert p.action == "halt" and p.rollback_to_step is None
    assert any("no checkpoint at least 100 steps before the episode onset (step 1500)" in r for r in p.reasons)


def test_one_nan_step_is_withheld_not_rolled_back(tmp_path):
    log = _csv(tmp_path, nan=[1800])
    a = analyze(log)
    (p,) = [p for p, i in zip(a.plans, a.incidents) if i.kind is K.NON_FINITE]
    assert p.action == "watch" and p.step is None and p.skipped_steps == [1800]
    assert any("withhold the update of 1 step(s) (step 1800)" in r for r in p.reasons)
    assert not simulate(log).of("rollback")


def test_plan_and_guard_share_one_recipe(tmp_path):
    from lossguard.guard.config import GuardConfig

    recipe = RecoveryRecipe(rollback_distance=40, skip_margin=10, lr_cut_factor=0.25)
    cfg = PlanConfig(recipe=recipe)
    assert cfg.guard_config().recipe is recipe
    assert PlanConfig(guard=GuardConfig(recipe=recipe)).recipe is recipe
    log = _csv(tmp_path, spikes=[(1500, [2.2, 2.0, 1.6, 1.2])])
    (p,) = [p for p in analyze(log, checkpoints=[1400, 1450, 1470], plan=cfg).plans if p.step is not None]
    assert p.rollback_to_step == 1450 and p.skip_batches.to_json() == [1500, 1502 + 1 + 10]


def _inc(kind, onset):
    return Incident(kind, "loss", onset, onset, onset + 5, 2.0, 3.0, 1.0, 10.0)


def test_decisions_are_filed_under_the_incident_they_are_about():
    incs = [_inc(K.SPIKE_FAST, 100), _inc(K.SPIKE_SLOW, 500), _inc(K.SUDDEN_DROP, 900)]
    decisions = [{"step": 50, "event": "skip"}, {"step": 501, "event": "skip"},
                 {"step": 503, "event": "rollback", "onset": 500, "to_step": 400, "skip_batches": [500, 704],
                  "reasons": ["r"]},
                 {"step": 400, "event": "lr_cut", "factor": 0.5, "reasons": ["cut"]},
                 {"step": 950, "event": "halt", "onset": 940, "reasons": ["h"]}]
    a, b, c = make_plans(incs, decisions)
    assert a.action == "watch" and a.skipped_steps == [50]       # before any incident: the first one's
    assert (b.action, b.step, b.rollback_to_step, b.lr_factor) == ("rollback", 503, 400, 0.5)
    assert b.reasons == ["r", "cut"] and b.skipped_steps == [501] and len(b.decisions) == 2
    assert c.action == "halt" and c.step == 950
    (orphan,) = make_plans([], decisions)[:1]
    assert orphan.incident is None and orphan.action == "rollback"


def test_parse_checkpoints_directory_and_list(tmp_path):
    for name in ("checkpoint-1200", "iter_0002400", "step_3600", "global_step4800", "logs"):
        (tmp_path / name).mkdir()
    assert parse_checkpoints(tmp_path) == [1200, 2400, 3600, 4800]
    assert parse_checkpoints("300, 100,200") == [100, 200, 300]
    with pytest.raises(LossguardError, match="neither a directory"):
        parse_checkpoints("not-a-dir")
    empty = tmp_path / "logs"
    with pytest.raises(LossguardError, match="no checkpoint"):
        parse_checkpoints(empty)


def test_parse_checkpoints_ignores_checkpoints_still_being_written(tmp_path):
    # lossguard's store and HF Trainer write under a temporary name and rename when complete.
    for name in ("step-00001200", ".tmp-step-00002400-77-1", "checkpoint-600", "tmp-checkpoint-1800"):
        (tmp_path / name).mkdir()
    assert parse_checkpoints(tmp_path) == [600, 1200]


def test_plan_config_validation():
    with pytest.raises(ConfigError, match="recipe"):
        PlanConfig(recipe=3)
