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


def test_a_growth_cut_asks_the_guard_to_roll_back_to_before_the_growth():
    from lossguard.recovery.action import Action
    from lossguard.recovery.decision import Decision
    from lossguard.recovery.ledger import RunLedger

    ledger = RunLedger()
    treat = PrecursorTreatment(TreatmentConfig(tau=1e6))
    out = []
    for step, v in enumerate([2.0] * 30 + _exp(2.0, 60.0, 21)[1:]):
        out += treat.treat(step, [], [[v]], ledger)
    asks = [d for d in out if isinstance(d, Decision)]
    assert len(asks) == 1 and asks[0].action is Action.ROLLBACK
    d = asks[0]
    # back to the first step of the growth window, no further; the cut is the treatment's own
    assert d.numbers["rollback_distance"] == 0 and 10 <= d.numbers["onset"] < d.step
    assert d.numbers["cut"] == pytest.approx(treat.lr_factor) and "growing" in d.reasons[0]
    assert ledger.lr_factor(d.step + 1) == 1.0  # booked by the executor when it rolls back, not here


def test_the_guard_rolls_back_a_real_model_whose_logits_grow_fast(tmp_path):
    torch = pytest.importorskip("torch")
    from lossguard.checkpoint.store import CheckpointStore
    from lossguard.demo.model import GPTConfig, TinyGPT
    from lossguard.guard import GuardConfig, StabilityGuard

    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8))
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)  # too high for it: logits x10 in < 20 steps
    guard = StabilityGuard(model, opt, config=GuardConfig(max_grad_norm=1.0), store=CheckpointStore(tmp_path / "ck"),
                           log_path=tmp_path / "run.jsonl", treatment=PrecursorTreatment(TreatmentConfig(tau=1e6)))
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 256, (4, 9), generator=g) for _ in range(40)]
    for _, b in guard.batches(batches, steps=40):
        _, loss = model(b[:, :-1], b[:, 1:])
        loss.backward()
        guard.step(loss)
    guard.close()
    rollbacks = [e for e in guard.events if e.get("event") == "rollback"]
    cuts = [e for e in guard.events if e.get("event") == "lr_cut"]
    assert rollbacks and rollbacks[0]["trigger"] == "attention_logits" and rollbacks[0]["to_step"] == 0
    assert cuts and cuts[0]["step"] == rollbacks[0]["onset"]  # the LR cut from the growth's first step
    assert guard.ledger.lr_factor(39) < 0.5
