"""Recovery plans: rollback target, batches to skip, LR and loss-scale advice, checkpoint parsing."""
from __future__ import annotations

import pytest

from lossguard.classify.incident import Incident, IncidentKind as K
from lossguard.errors import ConfigError, LossguardError
from lossguard.plan import PlanConfig, make_plans, parse_checkpoints


def _inc(kind, onset, peak=None, end=None, evidence="x"):
    peak = onset if peak is None else peak
    return Incident(kind, "loss", onset, peak, end, 2.0, 3.0, 1.0, 10.0, evidence=evidence)


def test_slow_spike_rolls_back_100_steps_and_skips_a_palm_sized_window():
    (p,) = make_plans([_inc(K.SPIKE_SLOW, 5000, 5005, 5400)])
    assert p.action == "rollback" and p.rollback_to_step == 4900 and not p.checkpoint_exists
    r = p.skip_batches                             # half-open [start, stop): the guard's convention
    assert (r.start, r.stop) == (5000, 5400 + 1 + 200)   # the episode's batches plus the recipe's margin
    assert p.to_dict()["skip_batches"] == [5000, 5601] and p.to_dict()["action"] == "rollback"
    assert p.lr_factor == 1.0 and p.reasons


def test_checkpoints_pick_the_newest_at_least_100_steps_before_onset():
    (p,) = make_plans([_inc(K.NON_FINITE, 5000)], checkpoints=[1000, 4800, 4950, 6000])
    assert p.rollback_to_step == 4800 and p.checkpoint_exists
    # One rule with the guard (choose_checkpoint): a checkpoint closer than rollback_distance is not used.
    (p,) = make_plans([_inc(K.NON_FINITE, 5000)], checkpoints=[4950, 6000])
    assert p.action == "halt" and p.rollback_to_step is None and any("scratch" in r for r in p.reasons)
    (p,) = make_plans([_inc(K.NON_FINITE, 5000)], checkpoints=[6000])
    assert p.action == "halt" and p.rollback_to_step is None


def test_kind_specific_advice():
    plans = make_plans([_inc(K.DIVERGENCE, 3000), _inc(K.LOSS_SCALE_COLLAPSE, 8000), _inc(K.SPIKE_FAST, 12000, end=12010),
                        _inc(K.SUDDEN_DROP, 20000), _inc(K.REPEATED_DATA, 30000)])
    div, ls, fast, drop, rep = plans
    assert div.action == "rollback" and div.lr_factor == 0.5 and div.skip_batches is None
    assert ls.reset_loss_scale and ls.action == "rollback"
    assert fast.action == "watch" and fast.rollback_to_step is None
    assert drop.action == "none"
    assert rep.action == "rollback" and rep.rollback_to_step == 30000


def test_repeated_spikes_are_planned_once():
    incs = [_inc(K.SPIKE_SLOW, s, end=s + 300) for s in (1000, 1500, 2000, 2500)]
    plans = make_plans(incs)
    assert [p.action for p in plans] == ["rollback", "rollback", "rollback", "watch"]
    assert plans[2].lr_factor == 0.5 and "cluster" in plans[3].reasons[0]


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
    with pytest.raises(ConfigError, match="repeat_count"):
        PlanConfig(repeat_count=1)


def test_divergence_advice_comes_from_the_structured_field_not_the_words():
    words_only = _inc(K.SPIKE_NO_RECOVERY, 5000, evidence="turning into divergence")
    flagged = _inc(K.SPIKE_NO_RECOVERY, 5000, evidence="no such words")
    flagged.details["turning_into_divergence"] = True
    a, b = make_plans([words_only]) + make_plans([flagged])
    assert a.lr_factor == 1.0 and b.lr_factor == 0.5


def test_plan_and_guard_share_one_recipe():
    from lossguard.guard.config import GuardConfig
    from lossguard.plan import PlanConfig
    from lossguard.recovery import RecoveryRecipe
    recipe = RecoveryRecipe(rollback_distance=40, skip_margin=10, lr_cut_factor=0.25)
    (p,) = make_plans([_inc(K.DIVERGENCE, 1000)], cfg=PlanConfig(recipe=recipe), checkpoints=[900, 960, 990])
    assert GuardConfig(recipe=recipe).recipe is recipe
    assert p.rollback_to_step == 960 and p.lr_factor == 0.25
