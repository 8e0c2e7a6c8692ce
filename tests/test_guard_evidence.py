"""The judge's calibrated rule: its three twins agree, healthy heavy tails pass, real trouble does not.

Twins: :class:`HostJudge` (Python floats), :class:`DeviceJudge` (tensors, no sync) and
:func:`evidence_series` (``lossguard simulate``'s vectorised replay) must give the same verdict
and name the same test on every step.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from lossguard.detect.outlier import OutlierConfig, score  # noqa: E402
from lossguard.guard import GuardConfig  # noqa: E402
from lossguard.guard.judge.evidence import EvidenceConfig, evidence_series  # noqa: E402
from lossguard.guard.judge import DeviceJudge, HostJudge, Judgement  # noqa: E402
from lossguard.recovery.verdict import Evidence  # noqa: E402


def _run(seed: int, n: int = 600):
    """A decaying loss and a heavy-tailed grad norm (log-normal, and 3% of steps 2-2.5x), with planted trouble:
    a 1e6x grad norm at step 2, a NaN gradient, a loss spike with its gradient, a lone 20x grad norm."""
    rng = np.random.default_rng(seed)
    loss = 2.0 * np.exp(-np.arange(n) / 200) + 0.5 + rng.normal(0, 0.02, n)
    gn = np.exp(rng.normal(0, 0.3, n)) * (1 + np.exp(-np.arange(n) / 50))
    gn *= np.where(rng.random(n) < 0.03, rng.uniform(2.0, 2.5, n), 1.0)  # healthy heavy tail: 2-2.5x excursions
    gn[2] *= 1e6
    gn[150] = np.nan
    loss[300] *= 3.0
    gn[300] *= 4.0
    gn[450] *= 20.0
    return loss, gn


def _every_kind(seed: int):
    """:func:`_run` plus the two kinds of trouble it lacks: a 20x loss at step 3 (the first-steps bound
    on the loss) and, at step 520, a grad norm 4x its recent median with the loss a few noise units up
    (the grad-norm outlier confirmed by the loss)."""
    loss, gn = _run(seed)
    loss[3] *= 20.0
    loss[520] += 0.15
    gn[520] = 4.0 * np.median(gn[400:520])
    loss[560:580] += 0.15   # a pocket: 20 steps ~4 noise units above the lagging baseline, none an outlier
    return loss, gn


def _host(loss, gn, cfg):
    j = HostJudge(cfg.loss, cfg.grad_norm, evidence=cfg.evidence)
    return [Judgement.verdict(j.judge(float(a), float(b)).packed, step=i, batch_index=i)
            for i, (a, b) in enumerate(zip(loss, gn))]


@pytest.mark.parametrize("seed", range(4))
def test_host_device_and_vectorised_twins_agree(seed):
    loss, gn = _every_kind(seed)
    # the loss-shift test is opt-in: on here, so every test of the rule is compared
    cfg = GuardConfig(grad_norm=OutlierConfig(window=64, stride=8), evidence=EvidenceConfig(shift_z=2.0))
    host = _host(loss, gn, cfg)
    dev = DeviceJudge(cfg.loss, cfg.grad_norm, evidence=cfg.evidence, device="cpu")
    device = [Judgement.verdict(dev.judge(torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)).packed,
                                step=i, batch_index=i) for i, (a, b) in enumerate(zip(loss, gn))]
    present = np.ones(len(gn), dtype=bool)
    bad, gn_out, ratio, ev = evidence_series(loss, score(loss, cfg.loss), gn, present, score(gn, cfg.grad_norm), cfg)
    assert [v.evidence for v in host] == [v.evidence for v in device] == [Evidence(int(e)) for e in ev]
    assert [v.bad for v in host] == [v.bad for v in device] == bad.tolist()
    np.testing.assert_allclose([v.grad_norm_ratio for v in host], ratio, rtol=1e-12, equal_nan=True)
    assert [v.grad_norm_outlier for v in host] == gn_out.tolist()
    # every test of the rule fired somewhere here, so each one's twins were compared on a hit
    fired = {Evidence(int(e)) for e in ev}
    assert fired == set(Evidence), set(Evidence) - fired
    assert Evidence(int(ev[3])) is Evidence.COLD_BOUND and Evidence(int(ev[520])) is Evidence.GRAD_AND_LOSS
    shifted = [v for v in host if v.evidence is Evidence.LOSS_SHIFT]
    assert shifted and all(560 <= v.step < 580 + 16 for v in shifted)
    assert [v.onset_lag for v in host] == [v.onset_lag for v in device]
    assert {v.onset_lag for v in shifted} == {cfg.evidence.shift_window - 1}


def test_what_fires_on_planted_trouble_and_nothing_else():
    loss, gn = _run(0)
    cfg = GuardConfig()
    verdicts = _host(loss, gn, cfg)
    flagged = {v.step: v.evidence for v in verdicts if v.bad}
    assert flagged[2] is Evidence.COLD_BOUND      # 1e6x before the statistics are warm
    assert flagged[150] is Evidence.NON_FINITE
    assert flagged[300] is Evidence.LOSS          # the loss spike (with its gradient)
    assert flagged[450] is Evidence.GRAD_TAIL     # a lone 20x gradient, loss unmoved
    # The heavy-tailed healthy grad norm is flagged by the analyser's MAD test here and there, but
    # costs the run nothing: no other step is withheld.
    assert set(flagged) == {2, 150, 300, 450}
    healthy_mad_flags = set(np.flatnonzero(score(gn, cfg.grad_norm).outlier).tolist()) - set(flagged)
    assert len(healthy_mad_flags) >= 2
    reasons = {v.step: " ".join(v.reasons()) for v in verdicts if v.bad}
    assert "tail" in reasons[450] and "sanity bound" in reasons[2]


def test_first_step_bound_uses_the_parameter_norm():
    cfg = EvidenceConfig()
    j = HostJudge(OutlierConfig(), OutlierConfig(), evidence=cfg)
    v = j.judge(2.0, 5e6, param_norm=10.0)
    assert v.bad and Judgement.verdict(v.packed, step=0, batch_index=0).evidence is Evidence.COLD_BOUND
    fine = HostJudge(OutlierConfig(), OutlierConfig(), evidence=cfg).judge(2.0, 50.0, param_norm=10.0)
    assert not fine.bad


def test_evidence_config_names_its_bad_fields():
    from lossguard.errors import LossguardError

    with pytest.raises(LossguardError, match="grad_tail_factor"):
        EvidenceConfig(grad_tail_factor=0.5)
    with pytest.raises(LossguardError, match="grad_tail_quantile"):
        EvidenceConfig(grad_tail_quantile=0)


@pytest.mark.parametrize("cut", [200, 570])   # 570: inside the planted pocket, shift flags half full
def test_judge_state_round_trips_between_twins(cut):
    loss, gn = _every_kind(1)
    cfg = GuardConfig(evidence=EvidenceConfig(shift_z=2.0))
    a = HostJudge(cfg.loss, cfg.grad_norm, evidence=cfg.evidence)
    for x, y in zip(loss[:cut], gn[:cut]):
        a.judge(float(x), float(y))
    d = DeviceJudge(cfg.loss, cfg.grad_norm, evidence=cfg.evidence, device="cpu")
    d.load_state_dict(a.state_dict())
    assert d.state_dict()["shift"] == a.state_dict()["shift"]
    for x, y in zip(loss[cut:], gn[cut:]):
        ha = a.judge(float(x), float(y))
        da = d.judge(torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64))
        assert bool(ha.bad) == bool(da.bad)
        assert ha.packed == da.packed.tolist() or np.allclose(ha.packed, da.packed.tolist(), equal_nan=True)
    assert d.state_dict()["shift"] == a.state_dict()["shift"]
    assert math.isclose(a.state_dict()["grad_norm_tail"]["tail"], d.state_dict()["grad_norm_tail"]["tail"])


@pytest.mark.parametrize("window,stride", [(128, 16), (64, 8), (16, 5)])
def test_tail_series_equals_the_online_tail_bit_for_bit(window, stride):
    """The vectorised tail (strided rows of full windows, one quantile each) is the online one, exactly,
    while the window fills and after, with non-finite values left out as the online twin does."""
    from lossguard.guard.judge.tail import OnlineTail, tail_series

    cfg = OutlierConfig(window=window, stride=stride)
    x = np.exp(np.random.default_rng(window).normal(0, 0.5, 3000))
    online = OnlineTail(cfg, 0.9)
    ref = np.array([online.update(float(v)) for v in x])
    assert np.array_equal(tail_series(x, cfg, 0.9), ref, equal_nan=True)
    assert np.isnan(ref[:cfg.min_points]).all() and np.isfinite(ref[cfg.min_points:]).all()


@pytest.mark.parametrize("seed", range(2))
def test_grad_norm_evidence_waived_in_a_clipped_lr_ramp_by_all_three_twins(seed):
    """Issue 20: a grad-norm blow-up while the LR ramps up, with the update clipped, is the
    schedule's: no twin calls it bad (the grad-norm tail at 450 and the grad-with-loss at 520 are
    waived); the loss spike, the NaN and the first-steps bound still are."""
    loss, gn = _every_kind(seed)
    cfg = GuardConfig(grad_norm=OutlierConfig(window=64, stride=8), max_grad_norm=1.0)
    waived = np.zeros(len(loss), dtype=bool)
    waived[440:530] = True
    j = HostJudge(cfg.loss, cfg.grad_norm, evidence=cfg.evidence)
    host = [Judgement.verdict(j.judge(float(a), float(b), waived=bool(w)).packed, step=i, batch_index=i)
            for i, (a, b, w) in enumerate(zip(loss, gn, waived, strict=True))]
    dev = DeviceJudge(cfg.loss, cfg.grad_norm, evidence=cfg.evidence, device="cpu")
    f64 = dict(dtype=torch.float64)
    device = [Judgement.verdict(dev.judge(torch.tensor(a, **f64), torch.tensor(b, **f64), waived=bool(w)).packed,
                                step=i, batch_index=i)
              for i, (a, b, w) in enumerate(zip(loss, gn, waived, strict=True))]
    present = np.ones(len(gn), dtype=bool)
    bad, _, _, ev = evidence_series(loss, score(loss, cfg.loss), gn, present, score(gn, cfg.grad_norm), cfg,
                                    in_lr_ramp=waived)  # in the ramp, clipped (max_grad_norm=1.0): waived
    assert [v.evidence for v in host] == [v.evidence for v in device] == [Evidence(int(e)) for e in ev]
    assert not bad[440:530].any()
    assert {Evidence(int(e)) for e in ev} >= {Evidence.COLD_BOUND, Evidence.NON_FINITE, Evidence.LOSS}
    # without the waiver the same steps are grad-norm evidence
    _, _, _, ev0 = evidence_series(loss, score(loss, cfg.loss), gn, present, score(gn, cfg.grad_norm), cfg)
    assert Evidence(int(ev0[450])) is Evidence.GRAD_TAIL and Evidence(int(ev0[520])) is Evidence.GRAD_AND_LOSS


def test_ramp_clipped_needs_both_the_ramp_and_a_clip():
    from lossguard.guard.judge.evidence import ramp_clipped
    assert ramp_clipped(True, 1.0, 20) and not ramp_clipped(True, None, 20) and not ramp_clipped(False, 1.0, 20)
    assert not ramp_clipped(True, 1.0, 0)  # the LR-ramp rule switched off
