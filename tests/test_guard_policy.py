"""RecoveryPolicy on its own: the ladder skip -> rollback -> LR cut -> halt, and its ledger."""
from __future__ import annotations

import json
import math

from lossguard.guard.config import GuardConfig
from lossguard.recovery import Action, RecoveryPolicy, RecoveryRecipe, RunLedger, SkipRange, Verdict
from lossguard.errors import ConfigError

import pytest


def rec(step, bad=False, *, batch=None, overflow=False, scale=math.nan):
    return Verdict(step=step, batch_index=step if batch is None else batch, loss=9.0 if bad else 1.0,
                      grad_norm=1.0, loss_z=20.0 if bad else 0.1, grad_norm_z=0.0, loss_baseline=1.0,
                      loss_outlier=bad, grad_norm_outlier=False, overflow=overflow, bad=bad, loss_scale=scale)


def actions(decisions):
    return [d.action for d in decisions]


def test_isolated_spikes_are_skipped_only():
    p = RecoveryPolicy(GuardConfig(episode_gap=5, rollback_after=3))
    seen = []
    for s in range(100):
        seen += p.observe(rec(s, bad=s in (10, 30, 50)))
    assert actions(seen) == [Action.SKIP] * 3
    assert seen[0].record()["event"] == "skip" and "loss outlier" in seen[0].reasons[0]


def test_spikes_close_together_roll_back_with_the_data_range():
    p = RecoveryPolicy(GuardConfig(episode_gap=5, rollback_after=3, recipe=RecoveryRecipe(skip_margin=7)))
    out = []
    for s in range(40):
        out += p.observe(rec(s, bad=s in (20, 23, 27), batch=s + 1000))
    assert actions(out) == [Action.SKIP, Action.SKIP, Action.SKIP, Action.ROLLBACK]
    rb = out[-1]
    assert rb.numbers["onset"] == 20 and rb.numbers["skip_batches"] == [1020, 1027 + 1 + 7]
    follow = p.rolled_back(rb, to_step=0)
    assert follow == [] and p.ledger.skip_ranges == [SkipRange(start=1020, stop=1035)]  # no LR cut on the first rollback by default
    assert p.skip_to(1025) == 1035 and p.skip_to(1035) is None and p.skip_to(1019) is None


def test_gap_larger_than_episode_gap_starts_a_new_episode():
    p = RecoveryPolicy(GuardConfig(episode_gap=5, rollback_after=3))
    out = []
    for s in range(60):
        out += p.observe(rec(s, bad=s in (10, 14, 25, 29)))
    assert Action.ROLLBACK not in actions(out)


def test_lr_cut_from_the_nth_rollback_and_halt_when_budget_spent():
    cfg = GuardConfig(episode_gap=2, rollback_after=2, max_rollbacks=2, lr_cut_from=2, lr_cut_steps=50,
                      recipe=RecoveryRecipe(lr_cut_factor=0.25))
    p = RecoveryPolicy(cfg)
    kinds = []
    for k in range(3):
        base = 100 * (k + 1)
        ds = p.observe(rec(base, True)) + p.observe(rec(base + 1, True))
        kinds.append(actions(ds)[-1])
        if ds[-1].action is Action.ROLLBACK:
            follow = p.rolled_back(ds[-1], to_step=base - 50)
            if k == 1:
                assert actions(follow) == [Action.LR_CUT]
                assert p.lr_factor(base - 50) == 0.25 and p.lr_factor(base) == 1.0
            else:
                assert follow == []
    assert kinds == [Action.ROLLBACK, Action.ROLLBACK, Action.HALT]
    assert p.halted


def test_transient_faults_do_not_build_an_episode():
    p = RecoveryPolicy(GuardConfig(episode_gap=5, rollback_after=2))
    out = []
    for s in range(10, 16):
        out += p.observe(rec(s, True), transient=True)
    assert actions(out) == [Action.SKIP] * 6 and all(d.numbers["transient"] for d in out)


def test_loss_scale_collapse_and_overflow_streak():
    p = RecoveryPolicy(GuardConfig(min_loss_scale=1.0, max_overflow_streak=4), has_scaler=True)
    assert actions(p.observe(rec(0, overflow=True, scale=0.5))) == [Action.LOSS_SCALE_RESET]
    out = []
    for s in range(1, 10):
        out += p.observe(rec(s, overflow=True, scale=64.0))
    assert actions(out) == [Action.LOSS_SCALE_RESET, Action.LOSS_SCALE_RESET]  # at streaks 4 and 8


def test_ledger_survives_a_rollback_but_episode_does_not():
    p = RecoveryPolicy(GuardConfig(episode_gap=5, rollback_after=2))
    before = p.state_dict()  # the checkpoint's copy of the timeline: calm
    p.observe(rec(10, True))
    assert p.episode_onset == 10 and p.state_dict()["episode"]["onset_step"] == 10
    ds = p.observe(rec(11, True))
    p.rolled_back(ds[-1], to_step=0)
    p.load_state_dict(before)        # the checkpoint restores the timeline; the ledger is not in it
    assert p.rollbacks == 1 and p.ledger.skip_ranges and p.episode_onset is None


def test_config_errors_name_every_field():
    with pytest.raises(ConfigError) as e:
        GuardConfig(gate="gpu", episode_gap=0)
    msg = str(e.value)
    assert "gate" in msg and "episode_gap" in msg and "fix" in msg
    with pytest.raises(ConfigError, match="recipe.lr_cut_factor"):
        RecoveryRecipe(lr_cut_factor=2.0)


def _episode(p, onset, batch, n=2):
    """``n`` bad steps from ``onset`` on batches from ``batch``; returns the last decision."""
    ds = []
    for i in range(n):
        ds += p.observe(rec(onset + i, True, batch=batch + i))
    return ds[-1]


def test_recurrence_at_the_same_place_on_other_data_cuts_the_lr_decisively():
    p = RecoveryPolicy(GuardConfig(episode_gap=2, rollback_after=2, recurrences_to_cut=1, recurrence_window=10,
                                   recipe=RecoveryRecipe(skip_margin=5)))
    first = _episode(p, 200, 200)
    assert first.action is Action.ROLLBACK and first.numbers["suspect"] == "data"
    assert p.rolled_back(first, to_step=150) == []          # bad data first: skip it, no LR cut
    second = _episode(p, 201, 250)                          # back one step later, on other batches
    assert second.action is Action.ROLLBACK and second.numbers["suspect"] == "optimizer"
    assert second.numbers["recurrence_of"] == 200 and "recurrence" in second.reasons[1]
    (cut,) = p.rolled_back(second, to_step=150)
    rec_ = cut.record()
    assert rec_["event"] == "lr_cut" and rec_["cause"] == "recurrence" and rec_["until_step"] is None
    assert rec_["factor"] == 0.1 and "optimizer instability" in rec_["reasons"][0]
    assert p.lr_factor(150) == 0.1 and p.lr_factor(10_000) == 0.1   # held for the rest of the run
    third = _episode(p, 203, 300)                           # still there: the cuts compound
    (cut2,) = p.rolled_back(third, to_step=150)
    assert cut2.numbers["factor"] == pytest.approx(0.01) and p.lr_factor(160) == pytest.approx(0.01)


def test_a_later_episode_elsewhere_is_not_a_recurrence():
    p = RecoveryPolicy(GuardConfig(episode_gap=2, rollback_after=2, recurrence_window=10, lr_cut_from=0))
    p.rolled_back(_episode(p, 200, 200), to_step=150)
    later = _episode(p, 260, 310)                           # 60 steps on: a new episode, new data
    assert later.numbers["suspect"] == "data" and "recurrence_of" not in later.numbers
    assert p.rolled_back(later, to_step=200) == [] and p.lr_factor(250) == 1.0


def test_recurrence_cut_with_a_window_and_disabled():
    p = RecoveryPolicy(GuardConfig(episode_gap=2, rollback_after=2, recurrences_to_cut=1, recurrence_lr_factor=0.3,
                                   recurrence_lr_steps=40))
    p.rolled_back(_episode(p, 100, 100), to_step=50)
    (cut,) = p.rolled_back(_episode(p, 100, 400), to_step=50)
    assert cut.numbers["until_step"] == 90 and p.lr_factor(89) == 0.3 and p.lr_factor(90) == 1.0
    off = RecoveryPolicy(GuardConfig(episode_gap=2, rollback_after=2, recurrences_to_cut=1, recurrence_lr_factor=1.0, lr_cut_from=0))
    off.rolled_back(_episode(off, 100, 100), to_step=50)
    assert off.rolled_back(_episode(off, 100, 400), to_step=50) == [] and off.lr_factor(60) == 1.0


def test_recurrence_when_the_budget_is_spent_halts_and_says_why():
    p = RecoveryPolicy(GuardConfig(episode_gap=2, rollback_after=2, recurrences_to_cut=1, max_rollbacks=1))
    p.rolled_back(_episode(p, 100, 100), to_step=50)
    halt = _episode(p, 100, 400)
    assert halt.action is Action.HALT and halt.numbers["suspect"] == "optimizer"
    assert any("recurrence" in r for r in halt.reasons) and "budget spent" in halt.reasons[-1]


def test_recurrence_state_lives_in_the_ledger_which_round_trips_through_its_file(tmp_path):
    p = RecoveryPolicy(GuardConfig(episode_gap=2, rollback_after=2, recurrences_to_cut=1))
    p.rolled_back(_episode(p, 100, 100), to_step=50)
    p.rolled_back(_episode(p, 101, 400), to_step=50)
    p.ledger.save(tmp_path / "ledger.json")
    text = (tmp_path / "ledger.json").read_text()
    assert "NaN" not in text and json.loads(text)["format"] == "lossguard-ledger"
    q = RecoveryPolicy(GuardConfig(), ledger=RunLedger.load(tmp_path / "ledger.json"))
    assert q.lr_factor(70) == 0.1 and q.ledger.last_rollback["onset"] == 101 and q.ledger.recurrences == 1
    assert q.ledger.skip_ranges == p.ledger.skip_ranges


def test_recurrence_config_errors():
    with pytest.raises(ConfigError) as e:
        GuardConfig(recurrence_lr_factor=0.0, recurrence_lr_steps=0, recurrence_window=-1)
    msg = str(e.value)
    assert "recurrence_lr_factor" in msg and "recurrence_lr_steps" in msg and "recurrence_window" in msg


def test_default_recurrence_window_is_the_episode_gap():
    p = RecoveryPolicy(GuardConfig(episode_gap=5, rollback_after=2, recurrences_to_cut=1, lr_cut_from=0))
    p.rolled_back(_episode(p, 100, 100), to_step=50)
    assert _episode(p, 106, 400).numbers["suspect"] == "data"      # 6 > episode_gap: another episode
    q = RecoveryPolicy(GuardConfig(episode_gap=5, rollback_after=2, recurrences_to_cut=1, lr_cut_from=0))
    q.rolled_back(_episode(q, 100, 100), to_step=50)
    assert _episode(q, 105, 400).numbers["suspect"] == "optimizer"  # 5: the same episode again


def test_by_default_two_recurrences_are_needed_before_the_cut():
    p = RecoveryPolicy(GuardConfig(episode_gap=2, rollback_after=2, lr_cut_from=0))
    p.rolled_back(_episode(p, 100, 100), to_step=50)
    again = _episode(p, 100, 400)
    assert again.numbers["recurrence"] == 1 and again.numbers["suspect"] == "data"
    assert "not yet enough" in again.reasons[1] and p.rolled_back(again, to_step=50) == []
    third = _episode(p, 100, 700)
    assert third.numbers["recurrence"] == 2 and third.numbers["suspect"] == "optimizer"
    (cut,) = p.rolled_back(third, to_step=50)
    assert cut.numbers["cause"] == "recurrence" and p.lr_factor(60) == 0.1
    with pytest.raises(ConfigError, match="recurrences_to_cut"):
        GuardConfig(recurrences_to_cut=0)
