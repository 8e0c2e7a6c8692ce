"""The loss-shift test (opt-in): a pocket of bad data that no single step shows, caught and skipped whole."""
from __future__ import annotations

import json

import numpy as np

from lossguard.guard import GuardConfig
from lossguard.guard.config_file import load_config
from lossguard.guard.judge.evidence import EvidenceConfig
from lossguard.io import read_log
from lossguard.recovery import PolicyConfig, RecoveryPolicy
from lossguard.recovery.verdict import Evidence, Verdict
from lossguard.simulate import simulate


def _pocket_log(tmp_path, *, lift: float, start: int = 300, length: int = 20, n: int = 500):
    """A plateaued loss with Gaussian noise (sigma 0.02) and ``length`` steps lifted by ``lift``."""
    rng = np.random.default_rng(0)
    loss = 2.0 + 0.3 * np.exp(-np.arange(n) / 60) + rng.normal(0, 0.02, n)
    loss[start:start + length] += lift
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps({"step": i, "loss": float(v)}) + "\n" for i, v in enumerate(loss)))
    return read_log(path)


ON = GuardConfig(checkpoint_every=50, evidence=EvidenceConfig(shift_z=2.0))


def test_a_pocket_within_the_noise_is_rolled_back_and_skipped_from_its_start(tmp_path):
    # 3 noise units: no step is an outlier (z >= 7), but every one of them is elevated (z >= 2)
    sim = simulate(_pocket_log(tmp_path, lift=0.06), ON)
    skips = sim.of("skip")
    assert skips and all("loss shift test" in " ".join(d["reasons"]) for d in skips)
    rollback = sim.of("rollback")[0]
    start, stop = rollback["skip_batches"]
    window = GuardConfig().evidence.shift_window
    assert start <= 300 and start >= skips[0]["step"] - (window - 1)   # back-dated to the window's start
    assert stop >= 320                                                  # the whole pocket is skipped
    assert rollback["to_step"] <= start - 100


def test_the_same_log_without_the_pocket_gets_nothing(tmp_path):
    assert simulate(_pocket_log(tmp_path, lift=0.0), ON).decisions == []


def test_the_test_is_off_by_default_and_on_from_toml(tmp_path):
    assert GuardConfig().evidence.shift_z is None
    assert simulate(_pocket_log(tmp_path, lift=0.06), GuardConfig(checkpoint_every=50)).decisions == []
    toml = tmp_path / "guard.toml"
    toml.write_text('checkpoint_every = 50\n[evidence]\nshift_z = 2.0\n')
    assert simulate(_pocket_log(tmp_path, lift=0.06), load_config(toml)).of("rollback")
    toml.write_text('[evidence]\nshift_z = "none"\n')   # an optional nested field set to None
    assert load_config(toml).evidence.shift_z is None


def test_the_policy_back_dates_the_episode_by_the_verdicts_onset_lag():
    def shifted(step: int) -> Verdict:
        return Verdict(step=step, batch_index=1000 + step, loss=2.1, grad_norm=1.0, loss_z=3.0, grad_norm_z=0.0,
                       loss_baseline=2.0, loss_outlier=False, grad_norm_outlier=False, overflow=False, bad=True,
                       evidence=Evidence.LOSS_SHIFT, onset_lag=15)

    policy = RecoveryPolicy(PolicyConfig(), run_steps=10_000)
    decisions = [d for s in (250, 251, 252) for d in policy.observe(shifted(s))]
    rollback = next(d for d in decisions if d.action.value == "rollback")
    assert rollback.numbers["onset"] == 235
    assert rollback.numbers["skip_batches"] == [1235, 1252 + 1 + 200]
