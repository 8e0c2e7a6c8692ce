"""Report and guard agree: ``simulate`` over a logged unguarded run decides what a live guarded run
of the same data and seed decides, at the same steps, up to the guard's first action that changes
the future (the demo's tiny GPT with its bad-data pocket)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from conftest import SHORT_DEMO_STEPS  # noqa: E402
from lossguard.demo.run import DemoConfig  # noqa: E402
from lossguard.demo.train import demo_guard_config  # noqa: E402
from lossguard.io import read_log  # noqa: E402
from lossguard.simulate import simulate  # noqa: E402

DECISIONS = ("skip", "rollback", "lr_cut", "halt")


def _decisions(records):
    out = []
    for r in records:
        if r["event"] in DECISIONS:
            out.append((r["event"], r["step"], r.get("skip_batches"), r.get("to_step")))
            if r["event"] in ("rollback", "lr_cut", "halt"):
                break  # the future changes here: the recorded log no longer shows what the guard saw
    return out


@pytest.mark.slow  # the shared short demo (two tiny-GPT runs, conftest.py) when run on its own: ~40 s loaded
def test_simulated_decisions_match_the_live_guard_on_the_bad_pocket(short_demo):
    """The runs of ``lossguard demo --steps 120`` (shared with tests/test_demo.py): its unguarded log
    replayed with the guard settings the demo used against the decisions of its guarded run."""
    out, proc = short_demo
    assert proc.returncode == 0, proc.stderr
    sc = DemoConfig(steps=SHORT_DEMO_STEPS).scenario_obj()
    cfg = demo_guard_config(sc, grad_norm=None)  # what `lossguard demo` runs
    sim = simulate(read_log(out / "unguarded.jsonl"), cfg)
    want = _decisions(read_log_events(out / "guarded.jsonl"))
    got = _decisions(sim.decisions)
    assert want and want[-1][0] == "rollback"      # the pocket is skipped, then rolled back over
    assert got == want
    assert sim.first_change == want[-1][1]


def test_simulated_loss_rise_rollback_matches_the_live_guard_on_a_zoo_lr_jump(tmp_path):
    """The loss-rise rule ("the loss does not come back"): a zoo MLP whose LR jumps 10-30x at mid-run,
    judged on its loss (the rule watches the loss baseline). Live: no skip, then a rollback with
    cause ``loss_rising`` and a 10x LR cut; simulate over the unguarded log of the same seed must
    decide the same at the same step, to the same checkpoint."""
    from lossguard.guard.config import GuardConfig
    from lossguard.recovery import RecoveryRecipe
    from evals.zoo import RunSpec, Scenario, run

    # The default rollback distance (100) reaches past the store's keep-last-3 checkpoints: the guard
    # keeps the loss-rise target protected, so live and simulate (which assumes every checkpoint
    # exists) both roll back to the same one instead of the live guard halting.
    cfg = GuardConfig(grad_norm=None, checkpoint_every=50)
    assert cfg.recipe.rollback_distance == RecoveryRecipe().rollback_distance == 100
    spec = RunSpec(family="mlp", seed=1, scenario=Scenario.LR_JUMP, steps=400)
    plain = run(spec, record=True)
    live = run(spec.with_(guarded=True), config=cfg, workdir=tmp_path / "live")
    assert live.rollbacks == 1 and live.lr_cuts == 1 and not live.halted and live.skips == 0
    log = tmp_path / "plain.csv"
    log.write_text("step,loss\n" + "".join(f"{i},{v!r}\n" for i, v in enumerate(plain.series["loss"])))
    sim = simulate(read_log(log), cfg)
    events = read_log_events(tmp_path / "live" / "guard.jsonl")
    want, got = _decisions(events), _decisions(sim.decisions)
    assert want and want[-1][0] == "rollback"
    assert got == want
    live_rb = [e for e in events if e["event"] == "rollback"][0]
    sim_rb = sim.of("rollback")[0]
    assert live_rb["cause"] == sim_rb["cause"] == "loss_rising"
    assert live_rb["onset"] == sim_rb["onset"] and sim.first_change == live_rb["step"]
    assert sim.of("lr_cut")[0]["cause"] == "loss_rising"


def read_log_events(path):
    """The guard's decision records from its JSONL log (metric records have no ``event``)."""
    import json

    return [r for r in (json.loads(x) for x in path.read_text().splitlines() if x.strip()) if "event" in r]
