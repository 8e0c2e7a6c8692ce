"""``simulate`` replays the opt-in update-size test when the log carries the update ratio (issue 20):
an LR jump that leaves the loss flat is seen by the ratio, and its LR cut joins the decisions."""
from __future__ import annotations

import json

import numpy as np
import pytest

from lossguard import metrics as M
from lossguard.guard.update_size import UpdateSizeConfig
from lossguard.io import read_log
from lossguard.simulate import simulate


def _log(tmp_path, jump_at: int | None, ratio: bool = True, n: int = 500):
    rng = np.random.default_rng(0)
    lr = np.full(n, 1e-3)
    if jump_at is not None:
        lr[jump_at:] *= 20  # an LR jump ...
    loss = 3.0 * np.exp(-np.arange(n) / 300) + 1.0 + rng.normal(0, 0.01, n)  # ... the loss does not show
    upd = lr * np.exp(rng.normal(0, 0.1, n))  # the update ratio follows the LR step for step
    path = tmp_path / "run.jsonl"
    with open(path, "w") as fh:
        for s in range(n):
            rec = {"step": s, "loss": float(loss[s]), "lr": float(lr[s])}
            if ratio:
                rec[M.UPDATE_RATIO] = float(upd[s])
            fh.write(json.dumps(rec) + "\n")
    return read_log(path)


def test_lr_jump_with_a_flat_loss_is_rolled_back_and_cut_back_from_the_update_ratio(tmp_path):
    log = _log(tmp_path, jump_at=300)
    assert simulate(log).decisions == []  # the loss and the policy see nothing
    sim = simulate(log, update_size=True)
    rb, cuts = sim.of("rollback"), sim.of("lr_cut")
    # the LR jumped with the update: the first jumped step is enough; back to the checkpoint at the jump
    assert rb[0]["step"] == 300 and rb[0]["to_step"] == 300 and rb[0]["cause"] == "update_jump"
    assert "jumped" in rb[0]["evidence"] and not rb[0].get("counterfactual")  # a schedule/config fault
    assert cuts[0]["step"] == 300 and cuts[0]["cause"] == "update_jump"
    assert cuts[0]["factor"] == pytest.approx(1 / 20)  # the LR back to what it was before the jump
    # the recorded log goes on at 20x (it was not guarded): everything after the rollback is counterfactual
    assert all(c.get("counterfactual") for c in cuts + rb[1:])
    assert sim.first_change == 300 and sim.summary()["actions"]["lr_cut"] == len(cuts) <= 2


def test_without_a_checkpoint_before_the_jump_the_cut_comes_alone(tmp_path):
    sim = simulate(_log(tmp_path, jump_at=300), update_size=True, checkpoints=[])
    assert sim.of("rollback") == [] and sim.of("lr_cut")[0]["step"] == 300
    assert any("no checkpoint" in r for r in sim.of("lr_cut")[0]["reasons"])
    sim = simulate(_log(tmp_path, jump_at=300), update_size=UpdateSizeConfig(rollback=False))
    assert sim.of("rollback") == [] and sim.of("lr_cut")[0]["factor"] == pytest.approx(1 / 20)


def test_no_jump_no_cut_and_a_log_without_the_ratio_says_so(tmp_path):
    assert simulate(_log(tmp_path, jump_at=None), update_size=UpdateSizeConfig()).decisions == []
    sim = simulate(_log(tmp_path, jump_at=300, ratio=False), update_size=True)
    assert sim.decisions == [] and any("update_ratio" in n for n in sim.notes)


def test_cli_flag(tmp_path, capsys):
    from lossguard.cli import main
    _log(tmp_path, jump_at=300)
    assert main(["simulate", str(tmp_path / "run.jsonl"), "--update-size"]) == 0
    out = capsys.readouterr().out
    assert "cut the LR" in out and "for the rest of the run" in out
    assert main(["simulate", str(tmp_path / "run.jsonl")]) == 0
    assert "would have done nothing" in capsys.readouterr().out


def test_at_an_unchanged_lr_three_jumped_updates_are_needed_and_the_cut_measures_the_update():
    """One hard batch (one large update, the LR unchanged) is not a fault; three in a row are (the
    optimizer's state or the gradients changed): rolled back to the first, cut by the update's jump."""
    from lossguard.guard.update_size import UpdateSizeTest
    from lossguard.recovery.action import Action

    test = UpdateSizeTest()
    for s in range(40):
        assert test.observe(s, 1e-3, lr=1e-3) == []
    assert test.observe(40, 8e-3, lr=1e-3) == []  # a hard batch
    assert test.observe(41, 1e-3, lr=1e-3) == []  # back to normal: the run of jumped updates ends
    assert test.observe(42, 1e-2, lr=1e-3) == [] and test.observe(43, 1e-2, lr=1e-3) == []
    (d,) = test.observe(44, 1e-2, lr=1e-3)
    assert d.action is Action.ROLLBACK and d.numbers["onset"] == 42 and d.numbers["rollback_distance"] == 0
    assert d.numbers["cut"] == pytest.approx(0.1) and "at the same LR" in d.numbers["evidence"]
