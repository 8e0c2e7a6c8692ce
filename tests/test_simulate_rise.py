"""``simulate`` replays the policy's loss-rise rule ("the loss does not come back") exactly.

The simulation feeds the policy only the bad steps and the steps where its vectorised twin of the
rule (:class:`LossRiseSeries`) fires; the reference here is the guard's own way, one step at a time:
the online :class:`HostJudge` on every point and a :class:`RecoveryPolicy` fed every verdict.
They must write the same decisions, at the same steps, with the same numbers.
"""
from __future__ import annotations

import numpy as np
import pytest

from lossguard.guard.config import GuardConfig
from lossguard.guard.judge import HostJudge, Judgement
from lossguard.io import read_log
from lossguard.recovery import RecoveryRecipe
from lossguard.recovery.policy import RecoveryPolicy
from lossguard.simulate import Simulation, _play, simulate


def _log(tmp_path, seed: int, rises=(500,), n=1600):
    """A decaying loss that turns and climbs ~40% from each step in ``rises`` (an LR jump that is
    not rescued), then comes down again; log-normal grad norms and a few single-step spikes."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    loss = 1.0 + 2.0 * np.exp(-t / 150)
    for r in rises:
        loss += np.where(t >= r, 0.4 * np.minimum(t - r, 400) / 400 * np.exp(-np.maximum(t - r - 400, 0) / 150), 0.0)
    loss += rng.normal(0, 0.03, n)
    gn = np.exp(rng.normal(0, 0.3, n))
    for s in rng.choice(np.arange(50, n), 6, replace=False):
        loss[s] *= 2.5
    path = tmp_path / f"run{seed}.csv"
    path.write_text("step,loss,grad_norm\n" + "".join(f"{i},{float(a)!r},{float(b)!r}\n"
                                                      for i, (a, b) in enumerate(zip(loss, gn))))
    return path, loss, gn


def _every_step(loss, gn, cfg) -> Simulation:
    """The reference: judge and policy on every step, as the live guard runs them."""
    judge, policy = HostJudge(cfg.loss, cfg.grad_norm, evidence=cfg.evidence), RecoveryPolicy(cfg)
    sim = Simulation(steps=len(loss), first_step=0, last_step=len(loss) - 1)
    ck = list(range(0, len(loss), cfg.checkpoint_every))
    for i, (a, b) in enumerate(zip(loss, gn)):
        v = Judgement.verdict(judge.judge(float(a), float(b)).packed, step=i, batch_index=i)
        if _play(policy.observe(v), [c for c in ck if c <= i], cfg, sim, policy):
            break
    return sim


@pytest.mark.parametrize("seed,rises", [(0, (500,)), (1, (500,)), (2, (400, 1000)), (3, ())])
def test_loss_rise_decisions_equal_a_policy_fed_every_step(tmp_path, seed, rises):
    cfg = GuardConfig(checkpoint_every=50, recipe=RecoveryRecipe(rollback_distance=50, skip_margin=20))
    path, loss, gn = _log(tmp_path, seed, rises)
    sim = simulate(read_log(path), cfg)
    ref = _every_step(loss, gn, cfg)
    assert sim.decisions == ref.decisions
    assert sim.first_change == ref.first_change
    causes = [d.get("cause") for d in sim.of("rollback")]
    if rises:
        # the rule fires, rolls back before the lowest point and cuts the LR 10x, in the log
        assert "loss_rising" in causes
        cut = [d for d in sim.of("lr_cut") if d.get("cause") == "loss_rising"][0]
        assert cut["cut"] == cfg.recurrence_lr_factor
        assert sim.first_change == sim.of("rollback")[0]["step"]
    else:
        assert "loss_rising" not in causes
    if len(rises) == 2:  # after its rollback the rule watches afresh, and fires again on the second rise
        assert causes.count("loss_rising") + len(sim.of("halt")) >= 2


def test_the_rule_off_means_no_loss_rise_decision(tmp_path):
    path, loss, gn = _log(tmp_path, 0)
    cfg = GuardConfig(checkpoint_every=50, loss_rise=None)
    sim = simulate(read_log(path), cfg)
    assert not [d for d in sim.decisions if d.get("cause") == "loss_rising"]
    assert sim.decisions == _every_step(loss, gn, cfg).decisions
