"""Known answers on real published logs (see tests/data/real-logs/README.md)."""
from __future__ import annotations

import pytest

from lossguard.analysis import analyze
from lossguard.classify.incident import IncidentKind as K
from lossguard.io import read_log

SPIKES = {K.SPIKE_FAST, K.SPIKE_SLOW, K.SPIKE_NO_RECOVERY, K.RESUME_SPIKE, K.STREAM_SPIKE}


def _analyze(real_logs, name):
    return analyze(read_log(real_logs / name))


def test_mixtral_single_sample_spikes_are_found(real_logs):
    a = _analyze(real_logs, "megatron_mixtral8x7b_v0p8_a100.csv")
    assert a.log_interval == 5
    spikes = [i for i in a.incidents if i.kind in SPIKES]
    peaks = {i.peak for i in spikes}
    # every spike the README lists (one logged sample wide, recovering by the next sample)
    for step in (1645, 2040, 2585, 2895, 3285, 3545, 3680):
        assert step in peaks, f"spike at {step} not found; got {sorted(peaks)}"
    big = next(i for i in spikes if i.peak == 2895)
    assert big.kind == K.SPIKE_FAST and 1.9 < big.peak_value / big.baseline < 2.1
    assert big.severity == "warning"
    assert not a.of_kind(K.DIVERGENCE, K.LEVEL_SHIFT, K.SPIKE_NO_RECOVERY, K.NON_FINITE)


@pytest.mark.parametrize("name", ["megatron_gpt3_15b_dev_h100.csv", "megatron_deepseekv3_proxy_dev_h100.csv",
                                  "mng_adamw_baseline_124m.csv"])
def test_smooth_runs_have_no_alarm(real_logs, name):
    a = _analyze(real_logs, name)
    assert a.incidents == [], [(i.kind.value, i.onset) for i in a.incidents]


def test_rl_loss_near_zero_is_a_hard_negative(real_logs):
    a = _analyze(real_logs, "dschat_rlhf_opt1p3b_ppo.csv")
    assert not [i for i in a.incidents if i.kind in SPIKES]
    assert any("zero" in n for n in a.notes)
    # its fp16 overflow skips are healthy dynamic scaling, not a collapse (scale never below 8192)
    assert not a.of_kind(K.LOSS_SCALE_COLLAPSE)


def test_bloom_176b_spike_with_grad_norm_first(real_logs):
    a = _analyze(real_logs, "bigscience_tr11_176b_excerpts.csv")
    spikes = [i for i in a.incidents if i.kind in SPIKES]
    assert len(spikes) == 1
    s = spikes[0]
    assert 31216 <= s.onset <= 31222 and s.peak == 31219 and s.end == 31250
    assert s.details["grad_norm"]["onset"] < s.onset  # the grad norm moved first
    assert "grad norm rose first" in s.evidence


def test_modded_nanogpt_data_outliers_are_fast_spikes_not_instability(real_logs):
    a = _analyze(real_logs, "mng_soap_124m.csv")
    peaks = {i.peak for i in a.incidents if i.kind == K.SPIKE_FAST}
    assert {919, 947, 5335} <= peaks
    assert not a.of_kind(K.DIVERGENCE, K.SPIKE_NO_RECOVERY, K.LEVEL_SHIFT, K.SPIKE_SLOW)
