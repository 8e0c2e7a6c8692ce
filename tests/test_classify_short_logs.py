"""Short logs (3-9 points, tests/data/short/README.md): judged by relative rules, never a bare
"No incidents", never a traceback."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lossguard.analysis import analyze
from lossguard.classify.incident import IncidentKind as K
from lossguard.cli import main
from lossguard.io import read_log

SHORT = Path(__file__).resolve().parent / "data" / "short"


def _analyze(name):
    return analyze(read_log(SHORT / name))


def test_a_jump_in_three_points_is_a_spike_too_short_to_judge_its_recovery():
    a = _analyze("jump_3p06_to_7p71.csv")
    (inc,) = a.incidents
    assert inc.kind is K.SPIKE_NO_RECOVERY and inc.onset == inc.peak == 1230
    assert inc.details["too_short_to_judge"] == "recovery" and "too short to tell" in inc.evidence
    assert inc.peak_value == pytest.approx(7.71) and inc.severity == "critical"
    assert any(n.startswith("3 points: too short to judge") for n in a.notes)


def test_a_five_point_climb_is_a_divergence_from_its_lowest_point():
    a = _analyze("climb_to_10p24.csv")
    (inc,) = a.incidents
    assert inc.kind is K.DIVERGENCE and inc.onset == 300 and inc.peak == 340
    assert a.plans[0].rollback_to_step is not None and a.plans[0].rollback_to_step < inc.onset


def test_the_fp16_excerpt_is_one_loss_scale_collapse_with_the_loss_climb_folded_in():
    a = _analyze("fp16_scale_halving.csv")
    (inc,) = a.incidents
    assert inc.kind is K.LOSS_SCALE_COLLAPSE and inc.onset == 8002
    assert inc.baseline == 65536 and inc.peak_value == 2048 and "halved 5 times" in inc.evidence
    assert [f["kind"] for f in inc.details["folded"]] == ["divergence"]
    assert a.plans[0].reset_loss_scale


def test_the_13b_excerpt_is_a_spike_at_the_jump_not_a_divergence_after_it():
    a = _analyze("spike_13b_excerpt.csv")
    (inc,) = a.incidents
    assert inc.kind is K.SPIKE_NO_RECOVERY and inc.onset == 29050 and inc.peak == 29060
    assert inc.baseline == pytest.approx(2.78)
    assert a.plans[0].rollback_to_step < 29050


def test_zero_loss_with_nan_grad_norms_is_one_incident_and_no_crash(capsys):
    a = _analyze("zero_loss_nan_grad.csv")
    (inc,) = a.incidents
    assert inc.kind is K.NON_FINITE and inc.metric == "grad_norm" and inc.onset == 2
    assert "exactly 0.0" in inc.evidence and inc.details["folded"][0]["kind"] == "regime_change"
    assert main(["analyze", str(SHORT / "zero_loss_nan_grad.csv"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["by_kind"] == {"non_finite": 1}


@pytest.mark.parametrize("name", sorted(p.name for p in SHORT.glob("*.csv")))
def test_every_short_case_reads_as_unhealthy_in_the_terminal(name, capsys):
    assert main(["analyze", str(SHORT / name)]) == 0
    out = capsys.readouterr().out
    assert "No incidents" not in out and "Traceback" not in out
    assert "UNHEALTHY:" in out and "points: too short to judge" in out


def test_a_flat_short_log_says_what_it_could_not_judge():
    from lossguard.runlog import RunLogBuilder

    b = RunLogBuilder("test")
    b.start_segment("mem://flat")
    b.add("loss", [10, 20, 30, 40, 50, 60], [3.0, 2.98, 3.01, 2.97, 2.99, 2.96])
    a = analyze(b.build())
    assert a.incidents == []
    (note,) = [n for n in a.notes if "too short to judge" in n]
    assert note.startswith("6 points:") and "slow recoveries" in note and "level shifts" in note


def _short(values):
    from lossguard.runlog import RunLogBuilder

    b = RunLogBuilder("test")
    b.start_segment("mem://short")
    b.add("loss", list(range(1, len(values) + 1)), values)
    return analyze(b.build())


def test_a_per_sample_loss_that_swings_all_along_has_no_spike_at_its_highest_swing():
    # one sample per point: every rise clears 24%, the highest is only the largest of the usual swings
    a = _short([1.2, 3.9, 1.4, 3.1, 0.9, 1.1, 4.6, 1.3, 2.8, 1.0])
    assert [i for i in a.incidents if i.kind in (K.SPIKE_FAST, K.SPIKE_SLOW, K.SPIKE_NO_RECOVERY)] == []


def test_a_spike_far_above_a_noisy_short_logs_swings_is_still_found():
    a = _short([3.1, 3.3, 3.0, 3.25, 2.95, 3.2, 9.4, 3.1, 3.2, 3.0])
    (inc,) = a.incidents
    assert inc.kind is K.SPIKE_FAST and inc.onset == 7


def _csv(tmp_path, values, start=100, every=100):
    p = tmp_path / "short.csv"
    p.write_text("step,loss\n" + "".join(f"{start + every * i},{v}\n" for i, v in enumerate(values)))
    return analyze(read_log(p))


def test_a_recovered_spike_before_a_blow_up_is_a_second_event(tmp_path):
    # the largest rise (the blow-up at the end) is judged first, then the stretch before its low
    a = _csv(tmp_path, [0.83, 0.61, 11.85, 0.12, 0.27, 0.33, 0.45, 0.39, 0.15, 0.54, 3417.8], start=317, every=1)
    kinds = {(i.kind, i.onset) for i in a.incidents}
    assert (K.SPIKE_FAST, 319) in kinds and (K.SPIKE_NO_RECOVERY, 327) in kinds


def test_a_falling_short_log_with_one_blow_up_has_one_event(tmp_path):
    a = _csv(tmp_path, [2.3, 2.1, 1.9, 1.8, 1.7, 1.65, 9.9])
    assert [(i.kind, i.onset) for i in a.incidents] == [(K.SPIKE_NO_RECOVERY, 700)]


def test_a_climb_is_dated_at_the_foot_of_its_final_rise_when_that_is_back_at_the_low(tmp_path):
    # swings at the low level (1.19-1.44), back to 1.20 at 600, then 1.77, 2.16, 2.37
    a = _csv(tmp_path, [1.396, 1.192, 1.346, 1.36, 1.444, 1.204, 1.774, 2.155, 2.374])
    (inc,) = a.incidents
    assert inc.kind is K.DIVERGENCE and inc.onset == 600


def test_a_climb_whose_final_rise_starts_high_is_dated_at_its_lowest_point(tmp_path):
    # a dip inside the climb (1.3 -> 1.25) is not its start: 1.25 is a quarter of the way up
    a = _csv(tmp_path, [1.0, 1.1, 1.3, 1.25, 1.6, 2.0])
    (inc,) = a.incidents
    assert inc.kind is K.DIVERGENCE and inc.onset == 100


def test_a_swing_that_fell_back_before_the_peak_counts_as_the_logs_own_noise(tmp_path):
    # a noisy loss (a GAN's discriminator): 0.05 -> 0.27 -> 0.13 then 0.46 and back: no event
    a = _csv(tmp_path, [0.20, 0.11, 0.22, 0.05, 0.27, 0.26, 0.13, 0.46, 0.12])
    assert not [i for i in a.incidents if i.severity in ("warning", "critical")], a.incidents


def test_rises_kept_on_the_way_up_are_the_event_not_noise(tmp_path):
    a = _csv(tmp_path, [1.1, 1.0, 1.05, 1.0, 1.6, 2.2, 3.2, 3.1])
    assert [i for i in a.incidents if i.kind in (K.SPIKE_NO_RECOVERY, K.DIVERGENCE, K.SPIKE_SLOW, K.SPIKE_FAST)]
