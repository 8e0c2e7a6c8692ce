"""Report and guard agree: ``simulate`` over a logged unguarded run decides what a live guarded run
of the same data and seed decides, at the same steps, up to the guard's first action that changes
the future (the demo's tiny GPT with its bad-data pocket)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from lossguard.demo.scenarios import SCENARIOS  # noqa: E402
from lossguard.demo.train import demo_guard_config, train  # noqa: E402
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


@pytest.mark.slow  # two tiny-GPT runs: ~12 s CPU, over 20 s on the loaded 2-core machine
def test_simulated_decisions_match_the_live_guard_on_the_bad_pocket(tmp_path):
    sc = SCENARIOS["bad_pocket"].with_(steps=240)
    cfg = demo_guard_config(sc, grad_norm=None)  # what `lossguard demo` runs
    train(sc, guarded=False, log_path=tmp_path / "plain.jsonl")
    live = train(sc, guarded=True, log_path=tmp_path / "guarded.jsonl", ckpt_dir=tmp_path / "ckpt", guard_config=cfg)
    sim = simulate(read_log(tmp_path / "plain.jsonl"), cfg)
    want = _decisions(live.events)
    got = _decisions(sim.decisions)
    assert want and want[-1][0] == "rollback"      # the pocket is skipped, then rolled back over
    assert got == want
    assert sim.first_change == want[-1][1]
