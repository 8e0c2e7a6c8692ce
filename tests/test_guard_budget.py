"""Per-incident rollback budgets (issue 10): an unrelated early blip cannot spend a later rescue;
an episode and its recurrences share one budget; a single skipped step never rolls back."""
from __future__ import annotations

from lossguard.guard.config import GuardConfig
from lossguard.recovery import Action, RecoveryPolicy, Verdict
from lossguard.recovery.verdict import Evidence


def _bad(step, batch=None):
    return Verdict(step=step, batch_index=step if batch is None else batch, loss=9.0, grad_norm=1.0, loss_z=20.0,
                   grad_norm_z=0.0, loss_baseline=1.0, loss_outlier=True, grad_norm_outlier=False, overflow=False,
                   bad=True, evidence=Evidence.LOSS)


def _episode(p, onset, batch, n=3):
    """Feed ``n`` bad steps from ``onset`` (data from ``batch``); returns the escalation decision."""
    out = []
    for k in range(n):
        out += p.observe(_bad(onset + k, batch + k))
    return out[-1]


def test_unrelated_episodes_each_get_their_own_budget():
    p = RecoveryPolicy(GuardConfig())
    for onset in (40, 120, 260, 400):  # four unrelated episodes (far apart): none is a recurrence
        d = _episode(p, onset, onset)
        assert d.action is Action.ROLLBACK and d.numbers["suspect"] == "data"
        p.rolled_back(d, to_step=max(0, onset - 100))
    assert p.ledger.rollbacks == 4 and not p.halted  # the old run-wide budget (3) would have halted


def test_an_incident_halts_after_its_own_budget_naming_the_tests():
    p = RecoveryPolicy(GuardConfig(rollbacks_per_incident=3))
    d = _episode(p, 40, 40)           # an early blip, then done
    p.rolled_back(d, to_step=0)
    for k, batch in enumerate((500, 800, 1100, 1400)):  # the same place again and again on fresh data
        d = _episode(p, 300, batch)
        if k < 3:  # rollback 1 (data), recurrence 1 (data again), recurrence 2 (LR cut): the incident's 3
            assert d.action is Action.ROLLBACK
            p.rolled_back(d, to_step=200)
    assert d.action is Action.HALT and "rollback budget spent for this incident" in " ".join(d.reasons)
    assert "tests that fired in this episode: loss outlier test" in " ".join(d.reasons)
    assert p.ledger.rollbacks == 4  # the blip's rollback did not count against the incident's three


def test_a_single_skip_never_rolls_back():
    p = RecoveryPolicy(GuardConfig())
    for s in range(0, 400, 25):  # isolated bad steps, more than episode_gap apart
        assert [d.action for d in p.observe(_bad(s))] == [Action.SKIP]
    assert p.ledger.rollbacks == 0 and p.ledger.skips == 16


def _calm(step, baseline):
    return Verdict(step=step, batch_index=step, loss=baseline, grad_norm=1.0, loss_z=0.0, grad_norm_z=0.0,
                   loss_baseline=baseline, loss_outlier=False, grad_norm_outlier=False, overflow=False, bad=False)


def test_a_loss_that_does_not_come_back_cuts_the_lr_decisively_from_its_lowest_point():
    """The optimizer fault no single step shows: the loss baseline climbs on new data. Rollback to
    before its lowest point and LR x0.1 from that point on, logged with the reason."""
    p = RecoveryPolicy(GuardConfig())
    decisions = []
    for s in range(600):
        level = 2.0 - s / 400 if s < 300 else 1.25 + (s - 300) / 200  # falls to 1.25 at step 300, then climbs
        decisions += p.observe(_calm(s, level))
        if decisions:
            break
    (d,) = decisions
    assert d.action is Action.ROLLBACK and d.numbers["cause"] == "loss_rising" and d.numbers["onset"] == 300
    assert "loss does not come back" in d.reasons[0] and d.step < 340  # caught at +10%, 25 steps after the low
    (cut,) = p.rolled_back(d, to_step=199)
    assert cut.action is Action.LR_CUT and cut.numbers["cause"] == "loss_rising" and "did not come back" in cut.reasons[0]
    assert p.lr_factor(267) == 1.0 and p.lr_factor(268) == 0.1 and p.lr_factor(10_000) == 0.1  # from 300 - lead 32


def test_healthy_wiggles_of_the_loss_level_do_not_trigger_the_rise_rule():
    p = RecoveryPolicy(GuardConfig())
    for s in range(2000):  # a level that wanders +-4% around a slow fall (healthy runs reach +2.9%)
        level = (1.0 - s / 10_000) * (1.0 + 0.04 * ((s // 50) % 2))
        assert p.observe(_calm(s, level)) == []
