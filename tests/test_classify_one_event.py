"""One event, one incident, the right kind: regime changes, sparse one-point outliers, the aftermath
of a drop, a loss-scale collapse with NaN grad norms, and the find_incidents rebinding regression."""
from __future__ import annotations

import numpy as np

from lossguard.analysis import analyze
from lossguard.classify.incident import IncidentKind as K
from lossguard.runlog import RunLogBuilder
from evals.synthetic import generate_run


def _log(steps, **series):
    b = RunLogBuilder("test")
    b.start_segment("mem://run")
    for name, values in series.items():
        b.add(name, steps, values)
    return b.build()


def test_repeated_data_then_divergence_gets_no_false_sudden_drop():
    # find_incidents used to rebind `near` (dict of boundaries -> array) halfway through, so the dip
    # at the resume was checked against the wrong boundaries and called a sudden drop.
    run = generate_run([K.REPEATED_DATA, K.DIVERGENCE], seed=58)
    kinds = [i.kind for i in analyze(run.log).incidents]
    assert K.SUDDEN_DROP not in kinds and K.DIVERGENCE in kinds


def test_a_mixtral_like_change_of_regime_is_one_finding_with_a_plan():
    # Loss ~3.0, then swinging between 1.3 and 2.7, then ~1.1 with a large variance (issue 11).
    rng = np.random.default_rng(0)
    steps = np.arange(5, 8001, 5)
    loss = (2.9 + 8 * (steps / 5.0) ** -0.5) * (1 + rng.normal(0, 0.01, len(steps)))
    k, m = np.searchsorted(steps, [3200, 4400])
    loss[k:m] = rng.uniform(1.3, 2.7, m - k)
    loss[m:] = 1.1 + np.abs(rng.normal(0, 0.25, len(steps) - m))
    a = analyze(_log(steps, loss=loss))
    (inc,) = a.incidents
    assert inc.kind is K.REGIME_CHANGE and abs(inc.onset - 3200) <= 10 and inc.severity == "critical"
    assert "suspiciously downward" in inc.evidence and "data pipeline" in inc.evidence
    assert inc.details["noise_ratio"] >= 3
    (plan,) = a.plans
    assert plan.action == "rollback" and plan.rollback_to_step < 3200
    assert any("data pipeline" in r for r in plan.reasons)


def test_a_one_point_outlier_in_a_sparse_log_is_fast_and_needs_no_rollback():
    rng = np.random.default_rng(3)
    steps = np.arange(200, 80_001, 200)                      # a 4-hour run logged every 200 steps
    loss = (2.0 + 8 * steps.astype(float) ** -0.3) * (1 + rng.normal(0, 0.004, len(steps)))
    loss[250] *= 1.31
    a = analyze(_log(steps, loss=loss))
    (inc,) = a.incidents
    assert inc.kind is K.SPIKE_FAST and inc.onset == 50_200 and inc.end == 50_400
    assert inc.details["points_to_recover"] == 1 and "next logged point" in inc.evidence
    assert a.plans[0].action in ("none", "watch") and a.plans[0].skip_batches is None


def test_a_slow_decay_in_a_sparse_log_is_still_slow():
    rng = np.random.default_rng(4)
    steps = np.arange(200, 80_001, 200)
    loss = (2.0 + 8 * steps.astype(float) ** -0.3) * (1 + rng.normal(0, 0.004, len(steps)))
    loss[250:] += 0.8 * np.exp(-np.arange(len(steps) - 250) / 6.0)   # ~30 points (6000 steps) to settle
    (inc,) = analyze(_log(steps, loss=loss)).incidents
    assert inc.kind is K.SPIKE_SLOW and inc.details["points_to_recover"] > 1


def test_the_aftermath_of_a_sudden_drop_is_not_a_level_shift():
    for seed in (20, 21, 22):
        run = generate_run(K.SUDDEN_DROP, seed=seed, length=8000, log_every=1, nuisances=False)
        kinds = [i.kind for i in analyze(run.log).incidents]
        assert K.SUDDEN_DROP in kinds and K.LEVEL_SHIFT not in kinds, (seed, kinds)


def test_a_loss_scale_collapse_with_nan_grad_norms_is_one_incident():
    rng = np.random.default_rng(1)
    steps = np.arange(1, 3001)
    loss = (2.5 + 6 * steps ** -0.4) * (1 + rng.normal(0, 0.01, len(steps)))
    grad = 0.8 * (1 + rng.normal(0, 0.05, len(steps)))
    scale = np.full(len(steps), 65536.0)
    scale[2000:2017] = 65536.0 / 2 ** np.arange(1, 18)
    scale[2017:] = 1.0
    grad[2000:] = np.where(rng.random(1000) < 0.8, np.nan, grad[2000:])   # overflows on most steps
    a = analyze(_log(steps, loss=loss, grad_norm=grad, loss_scale=scale))
    (inc,) = a.incidents
    assert inc.kind is K.LOSS_SCALE_COLLAPSE and inc.onset == 2001
    assert {f["kind"] for f in inc.details["folded"]} == {"non_finite"}
    assert a.plans[0].reset_loss_scale


def _shift_in_a_fine_tune(seed: int):
    # 675 points: a fine-tune still falling (3.3 -> 3.0 over steps 226-337), a step up of ~1.1 at 338,
    # then the same decline from the new level (4.2 -> 3.8 by the end), as litgpt's fixture shows it
    rng = np.random.default_rng(seed)
    steps = np.arange(1, 676)
    x = 6.69 - 0.625 * np.log(steps) + 0.04 * rng.standard_normal(len(steps))
    x[337:] += 1.1
    return _log(steps, loss=x)


def test_a_shift_with_little_history_is_judged_against_the_falling_trend_before_it():
    # fewer than three 128-point windows before the shift: the trend comes from thirds of the history
    for seed in range(3):
        incs = [i for i in analyze(_shift_in_a_fine_tune(seed)).incidents if i.metric == "loss"]
        assert [i.kind for i in incs] == [K.LEVEL_SHIFT], [(i.kind, i.onset) for i in incs]
        assert abs(incs[0].onset - 338) <= 2
