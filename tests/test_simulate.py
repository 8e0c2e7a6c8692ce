"""``lossguard simulate``: the guard's judge and policy replayed over recorded logs, offline."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lossguard.cli import main
from lossguard.errors import LossguardError
from lossguard.guard.config import GuardConfig
from lossguard.guard.config_file import load_config
from lossguard.io import read_log
from lossguard.recovery import RecoveryRecipe
from lossguard.simulate import simulate

REAL = Path(__file__).parent / "data" / "real-logs"


@pytest.mark.parametrize("name", ["megatron_gpt3_15b_dev_h100.csv", "megatron_deepseekv3_proxy_dev_h100.csv",
                                  "mng_adamw_baseline_124m.csv"])
def test_smooth_real_runs_get_no_intervention(name):
    sim = simulate(read_log(REAL / name))
    assert sim.steps > 9000
    assert sim.decisions == [] and sim.first_change is None


def test_mixtral_run_skips_its_known_single_step_spikes_and_never_rolls_back():
    sim = simulate(read_log(REAL / "megatron_mixtral8x7b_v0p8_a100.csv"))
    known = {1645, 2040, 2585, 2895, 3285, 3545, 3680}   # tests/data/real-logs/README.md
    skipped = set(sim.skipped_steps)
    assert known <= skipped
    # Measured, not tuned: the default judge also skips two more logged points -- 3685, the second
    # point of the 3680 spike (2.87 against a ~2.47 baseline, still 1.16x), and 4845 (2.71 against
    # ~2.34, 1.16x), a one-point spike the README's list does not name.
    assert skipped - known == {3685, 4845}
    assert [d["event"] for d in sim.decisions] == ["skip"] * 9 and sim.first_change is None


def _synthetic(tmp_path, spikes, n=600):
    rng = np.random.default_rng(0)
    loss = 3.0 - np.linspace(0, 1, n) + 0.01 * rng.standard_normal(n)
    for s in spikes:
        loss[s] = 9.0
    path = tmp_path / "run.csv"
    path.write_text("step,loss\n" + "".join(f"{i},{float(v)!r}\n" for i, v in enumerate(loss)))
    return path


def test_an_episode_rolls_back_to_the_shared_checkpoint_rule_and_marks_what_follows(tmp_path):
    path = _synthetic(tmp_path, [300, 302, 304, 500, 501, 502])
    cfg = GuardConfig(checkpoint_every=50, recipe=RecoveryRecipe(rollback_distance=100, skip_margin=20))
    sim = simulate(read_log(path), cfg)
    events = [(d["event"], d["step"]) for d in sim.decisions]
    assert events[:4] == [("skip", 300), ("skip", 302), ("skip", 304), ("rollback", 304)]
    rb = sim.of("rollback")[0]
    assert rb["to_step"] == 200 and rb["onset"] == 300 and rb["skip_batches"] == [300, 325]
    assert sim.first_change == 304 and all(d.get("counterfactual") for d in sim.decisions[4:])
    assert not any(d.get("counterfactual") for d in sim.decisions[:4])
    # the second episode: a second rollback, and from the 2nd rollback on the recipe's LR cut
    assert [d["event"] for d in sim.decisions[4:]] == ["skip", "skip", "skip", "rollback", "lr_cut"]


def test_cli_text_json_and_toml_config(tmp_path, capsys):
    path = _synthetic(tmp_path, [300, 302, 304])
    toml = tmp_path / "guard.toml"
    toml.write_text('max_rollbacks = 0\ncheckpoint_every = 50\n[recipe]\nrollback_distance = 100\n'
                    '[loss]\nz_threshold = 7.0\n')
    assert main(["simulate", str(path), "--config", str(toml)]) == 0
    out = capsys.readouterr().out
    assert "step 300: skip" in out and "HALT" in out and "resume from checkpoint 200" in out
    assert main(["simulate", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["actions"]["rollback"] == 1 and doc["conventions"]["skip_batches"].startswith("half-open")


@pytest.mark.parametrize("text, named", [("episode_gapp = 3\n", "episode_gapp"), ("[recipe]\nskip_marginn = 3\n", "skip_marginn"),
                                         ("rollback_after = 0\n", "rollback_after"),
                                         ("[recipe]\nlr_cut_factor = 3.0\n", "lr_cut_factor"),
                                         ("max_rollbacks = 'many'\n", "max_rollbacks")])
def test_bad_config_names_the_key(tmp_path, capsys, text, named):
    toml = tmp_path / "guard.toml"
    toml.write_text(text)
    with pytest.raises(LossguardError, match=named):
        load_config(toml)
    assert main(["simulate", str(_synthetic(tmp_path, [])), "--config", str(toml)]) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err


def test_batch_index_series_is_used_when_the_log_has_one(tmp_path):
    path = tmp_path / "run.jsonl"
    rows = [{"step": i, "loss": 9.0 if i in (300, 301, 302) else 3.0 - i / 1000 + 0.01 * ((i * 7) % 5),
             "batch_index": 1000 + i} for i in range(400)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sim = simulate(read_log(path), GuardConfig(checkpoint_every=50))
    # the margin is 5% of the 400-step log (RecoveryRecipe.max_skip_fraction), not the full 200
    assert sim.of("rollback")[0]["skip_batches"] == [1300, 1302 + 1 + 20]
    assert not any("batch index taken to be the step" in n for n in sim.notes)


def test_html_report_draws_the_simulated_actions(tmp_path, capsys):
    path = _synthetic(tmp_path, [300, 302, 304])
    out = tmp_path / "report.html"
    assert main(["simulate", str(path), "--html", str(out)]) == 0
    from lossguard.analysis import analyze
    from lossguard.report.html import report_data
    log = read_log(path)
    data = report_data(analyze(log), simulation=simulate(log))
    rows = [(g["event"], g["step"]) for g in data["guard"]]
    assert ("simulated skip", 300) in rows and ("simulated rollback", 304) in rows
    assert "simulated rollback" in out.read_text()
