"""The skip margin is scaled to the run: PaLM's 200 batches, at most 5% of a run whose length is known,
never below min_skip_margin (20)."""
import pytest

from lossguard.errors import LossguardError
from lossguard.recovery import RecoveryPolicy, PolicyConfig, RecoveryRecipe
from lossguard.recovery.verdict import Verdict


def test_margin_is_the_recipe_margin_for_long_or_unknown_runs():
    r = RecoveryRecipe()
    assert r.margin_for(None) == 200
    assert r.margin_for(255_000) == 200      # PaLM-sized: 200 is 0.08% of it
    assert r.margin_for(4_000) == 200        # 5% of 4000 is exactly 200


def test_margin_is_at_most_a_fraction_of_a_short_run():
    r = RecoveryRecipe()
    assert r.margin_for(400) == 20
    assert r.margin_for(200) == 20           # the floor (min_skip_margin), not 5% = 10 (issue 23)
    assert r.margin_for(10) == 20            # the floor whatever the run's length
    assert RecoveryRecipe(min_skip_margin=0).margin_for(10) == 1  # never zero: the next batch too
    assert RecoveryRecipe(max_skip_fraction=1.0).margin_for(400) == 200


def test_bad_fraction_is_named():
    with pytest.raises(LossguardError, match="max_skip_fraction"):
        RecoveryRecipe(max_skip_fraction=0)


def _bad(step: int) -> Verdict:
    return Verdict(step=step, batch_index=step, loss=9.0, grad_norm=1.0, loss_z=20.0, grad_norm_z=0.0,
                   loss_baseline=1.0, loss_outlier=True, grad_norm_outlier=False, overflow=False, bad=True)


@pytest.mark.parametrize("run_steps,stop", [(None, 303 + 200), (400, 303 + 20), (100_000, 303 + 200)])
def test_policy_rollback_skips_the_scaled_margin(run_steps, stop):
    policy = RecoveryPolicy(PolicyConfig(), run_steps=run_steps)
    decisions = [d for s in (300, 301, 302) for d in policy.observe(_bad(s))]
    rollback = [d for d in decisions if d.action.value == "rollback"]
    assert rollback and rollback[0].numbers["skip_batches"] == [300, stop]


def test_recurrence_right_after_withheld_skip_is_the_same_place():
    """HF/Lightning withhold the skipped batches' updates (batch index == step), so an LR fault comes
    back when updates resume, the skip's length after its first onset: still a recurrence."""
    policy = RecoveryPolicy(PolicyConfig(), run_steps=400)
    for s in (201, 202, 203):
        out = policy.observe(_bad(s))
    first = next(d for d in out if d.action.value == "rollback")
    assert first.numbers["skip_batches"] == [201, 224]
    policy.rolled_back(first, to_step=100)
    for s in (224, 225, 226):   # 23 steps after the first onset: beyond episode_gap (20)
        out = policy.observe(_bad(s))
    second = next(d for d in out if d.action.value == "rollback")
    assert second.numbers["recurrence"] == 1 and second.numbers["recurrence_of"] == 201


def test_an_episode_well_after_the_skip_is_a_new_incident():
    policy = RecoveryPolicy(PolicyConfig(), run_steps=400)
    for s in (201, 202, 203):
        out = policy.observe(_bad(s))
    policy.rolled_back(next(d for d in out if d.action.value == "rollback"), to_step=100)
    for s in (300, 301, 302):
        out = policy.observe(_bad(s))
    later = next(d for d in out if d.action.value == "rollback")
    assert "recurrence" not in later.numbers and later.numbers["suspect"] == "data"


@pytest.mark.parametrize("run_steps", [200, 1_000, 1_000_000])
def test_a_20_batch_pocket_is_skipped_whole_from_200_to_1m_steps(run_steps):
    """The guard acts after 3 of the pocket's 20 bad batches; the margin covers the other 17."""
    policy = RecoveryPolicy(PolicyConfig(), run_steps=run_steps)
    onset = run_steps // 2
    out = [d for s in range(onset, onset + 3) for d in policy.observe(_bad(s))]
    (rollback,) = [d for d in out if d.action.value == "rollback"]
    start, stop = rollback.numbers["skip_batches"]
    assert start == onset and stop >= onset + 20
    assert stop - onset <= max(23, 0.05 * run_steps + 3)  # and never more than 5% of the run beyond the floor
