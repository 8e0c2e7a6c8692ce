"""The growth-rate trigger of the precursor treatment: an LR cut when the largest attention logit grows
fast, none when it creeps up or grows from tiny initial values (``guard/logit_growth.py``)."""
from __future__ import annotations

import math

import pytest

from lossguard.guard.logit_growth import LogitGrowth
from lossguard.guard.treatment import PrecursorTreatment, TreatmentConfig


def _feed(treat, values):
    """Feed one layer of one head per step, below tau (so no QK-clip needs weights): the events."""
    out = []
    for step, v in enumerate(values):
        out += treat.treat(step, [], [[v]])
    return out


def _exp(start, end, steps):
    return [start * (end / start) ** (i / (steps - 1)) for i in range(steps)]


def test_fast_growth_cuts_the_lr_with_its_evidence():
    treat = PrecursorTreatment(TreatmentConfig(tau=1e6))  # the level never acts: the rate alone
    # 2 -> 60 in 20 steps (30x): an unstable LR's signature (harsh preset, LR 1e-2: 28x in 10)
    events = _feed(treat, [2.0] * 30 + _exp(2.0, 60.0, 21)[1:] + [60.0] * 10)
    cuts = [e for e in events if e["event"] == "lr_cut"]
    assert len(cuts) == 1 and "growing" in cuts[0]["evidence"] and cuts[0]["reasons"] == [cuts[0]["evidence"]]
    # flagged as soon as it had grown 10x (before a full window): sized to the growth per window
    # (ln 2 / ln G), deeper than the fixed halving, never deeper than min_cut_factor
    per_window = float(cuts[0]["evidence"].split("growing ")[1].split("x")[0])
    assert per_window > 10 and 0.1 <= treat.lr_factor < 0.5
    assert treat.lr_factor == pytest.approx(math.log(2) / math.log(per_window), rel=1e-2)


@pytest.mark.parametrize("values", [
    _exp(5.0, 30.0, 300),               # creeps up as the model learns (best LR: <= 2.3x in 20 steps above 10)
    _exp(0.2, 9.0, 40) + [9.0] * 40,    # 45x, but from initialisation-sized logits, below the floor
    [20.0, math.nan, 25.0, math.nan] * 30,  # not finite: the NaN test's business
], ids=["creep", "below-floor", "non-finite"])
def test_slow_or_small_growth_does_nothing(values):
    treat = PrecursorTreatment(TreatmentConfig(tau=1e6))
    assert _feed(treat, values) == [] and treat.lr_factor == 1.0


def test_growth_needs_a_full_window_after_each_cut_and_obeys_the_cut_budget():
    treat = PrecursorTreatment(TreatmentConfig(tau=1e15, max_lr_cuts=2))
    events = _feed(treat, _exp(1.0, 1e12, 200))  # relentless growth: 10x every ~17 steps
    cuts = [e["step"] for e in events if e["event"] == "lr_cut"]
    assert len(cuts) == 2 and cuts[1] - cuts[0] >= 20 and treat.lr_factor < 0.25


def test_state_round_trip_keeps_the_window():
    a = LogitGrowth(window=20, factor=10, floor=10)
    for s, v in enumerate(_exp(2.0, 15.0, 15)):
        assert a.update(s, v) is None
    b = LogitGrowth(window=20, factor=10, floor=10)
    b.load_state_dict(a.state_dict())
    tail = _exp(15.0, 40.0, 6)
    assert [a.update(15 + i, v) for i, v in enumerate(tail)] == [b.update(15 + i, v) for i, v in enumerate(tail)]



def test_the_cumulative_cut_has_a_floor():
    treat = PrecursorTreatment(TreatmentConfig(tau=1e45, max_lr_cuts=10, min_lr_factor=0.05))
    _feed(treat, _exp(1.0, 1e40, 400))
    assert treat.lr_factor == 0.05


def test_config_rejects_a_growth_factor_that_is_no_growth():
    from lossguard.errors import ConfigError
    with pytest.raises(ConfigError, match="growth_factor"):
        TreatmentConfig(growth_factor=1.0)


def test_heads_held_near_tau_spend_the_clip_budget_without_an_lr_cut():
    # clip=False: the budget is counted as if clipping (no weights needed); growth off: the level alone
    treat = PrecursorTreatment(TreatmentConfig(tau=100.0, clip=False, growth_factor=None))
    held = [100.0 + (i % 7) for i in range(150)]  # creeps to 101-106 and is clipped back: held
    assert not [e for e in _feed(treat, held) if e["event"] == "lr_cut"]
    escaped = held + [100.0 + 3 * i for i in range(1, 60)]  # the clip no longer holds them
    cuts = [e for e in _feed(PrecursorTreatment(treat.config), escaped) if e["event"] == "lr_cut"]
    assert cuts and all(e["step"] >= 150 for e in cuts) and "not holding" in cuts[0]["evidence"]
