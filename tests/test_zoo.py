"""The guard's model zoo, fast slice: healthy runs left alone, early faults skipped, the zoo itself honest.

The full zoo (6 families, >= 60 healthy runs, every scenario) is ``benchmarks/zoo.py``; these are the
cheapest cases that carry the same promises, on tuned families (mlp, cnn, encoder), plus one held-out
HF GPT-2 run for the restart path (exit 75, relaunch, resume from the ledger's checkpoint). Every case
below failed with the defaults before issue 10 (commit dc41642: healthy runs rolled back, LR-cut and
halted on heavy-tailed grad norms, also after a correctly skipped NaN; a 1e6x gradient at steps 0-5
passed the outlier test, which waits for 5 points); they were written first as strict xfails, and pass
now. The zoo's own checks (a run is a pure function of its spec, the faults really hurt an unguarded
run) make sure the guard's numbers mean something.
"""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from evals.zoo import FAMILIES, Optim, RunSpec, Scenario, Schedule, run  # noqa: E402
from evals.zoo import scenarios  # noqa: E402


def test_every_family_is_declared_tuned_or_held_out():
    """At least six families, and at least two of them held out of all tuning (issue 10)."""
    assert len(FAMILIES) >= 6
    held_out = sorted(n for n, f in FAMILIES.items() if not f.tuned)
    assert held_out == ["hf_gpt2", "lstm"]


def test_a_run_is_a_function_of_its_spec():
    """Two runs of one spec are the same computation (so guarded-vs-clean gaps are the guard's doing)."""
    spec = RunSpec(family="mlp", batch_size=32, steps=60, guarded=True)
    a, b = run(spec), run(spec)
    assert a.final_val == b.final_val and a.skips == b.skips and a.steps == b.steps == 60


def test_the_bad_pocket_really_hurts_an_unguarded_run():
    """20 garbage batches at 60% leave the unguarded MLP (SGD, batch 128) far above its clean loss."""
    base = RunSpec(family="mlp", batch_size=128, optimizer=Optim.SGD, steps=600)
    clean, hurt = run(base), run(base.with_(scenario=Scenario.BAD_POCKET))
    assert scenarios.pocket(base.with_(scenario=Scenario.BAD_POCKET)) == range(360, 380)
    assert hurt.final_val > 1.2 * clean.final_val


def test_the_lr_jump_and_the_schedules():
    """The LR-jump factor is 10-30x from mid-run on top of the warm-up schedules; warm-up starts small."""
    spec = RunSpec(family="mlp", steps=400, scenario=Scenario.LR_JUMP, schedule=Schedule.WARMUP_CONSTANT)
    f = scenarios.lr_lambda(spec)
    at, factor = scenarios.lr_jump(spec)
    assert at == 200 and factor in (10.0, 20.0, 30.0)
    assert f(0) == pytest.approx(1 / 40) and f(199) == 1.0 and f(200) == factor
    cos = scenarios.lr_lambda(spec.with_(scenario=Scenario.HEALTHY, schedule=Schedule.WARMUP_COSINE))
    assert cos(39) == 1.0 and cos(399) == pytest.approx(0.1, abs=1e-3)


HEALTHY = [
    pytest.param(RunSpec(family="mlp", batch_size=32, optimizer=Optim.ADAMW, steps=600), id="mlp-b32-adamw"),
    pytest.param(RunSpec(family="mlp", batch_size=16, optimizer=Optim.SGD, steps=600,
                         schedule=Schedule.WARMUP_CONSTANT), id="mlp-b16-sgd"),
    pytest.param(RunSpec(family="cnn", batch_size=128, optimizer=Optim.ADAMW), id="cnn-b128-adamw"),
    pytest.param(RunSpec(family="encoder", batch_size=16, optimizer=Optim.ADAMW,
                         schedule=Schedule.WARMUP_CONSTANT), id="encoder-b16-adamw"),
]


@pytest.mark.parametrize("spec", HEALTHY)
def test_a_healthy_run_gets_no_intervention(spec):
    """A healthy run is never rolled back, LR-cut or halted, and at most 1% of its steps are skipped."""
    out = run(spec.with_(guarded=True))
    assert (out.rollbacks, out.lr_cuts, out.halted) == (0, 0, False), out.reasons
    assert out.steps == spec.steps
    assert out.skips <= 0.01 * spec.steps, out.reasons


EARLY = [
    # variant(): mlp, batch 32, AdamW, seed s -> the fault lands at step s.
    pytest.param(Scenario.EARLY_NAN, 0, id="nan-step0"),
    pytest.param(Scenario.EARLY_NAN, 3, id="nan-step3"),
    pytest.param(Scenario.EARLY_HUGE, 0, id="1e6x-step0"),
    pytest.param(Scenario.EARLY_HUGE, 2, id="1e6x-step2"),
]


@pytest.mark.parametrize("scenario,seed", EARLY)
def test_an_early_gradient_fault_is_skipped(scenario, seed):
    """A NaN or a 1e6x gradient at steps 0-5 is withheld, and the run ends as well as its clean twin."""
    spec = RunSpec(family="mlp", batch_size=32, seed=seed, steps=200, scenario=scenario)
    assert scenarios.early_fault_step(spec) == seed
    out = run(spec.with_(guarded=True))
    assert out.fault_steps == [seed]
    assert out.fault_skipped, out.reasons
    clean = run(spec.with_(scenario=Scenario.HEALTHY))
    assert math.isfinite(out.final_val) and out.final_val <= 1.02 * clean.final_val


def test_the_hf_family_rolls_back_through_the_restart_path(tmp_path):
    """The HF run saves checkpoints; the callback's rollback ends the process with exit code 75 and
    the run is launched again from the checkpoint the ledger names (``resume_checkpoint``), as under
    ``torchrun --max-restarts``: no halt, the pocket's batches withheld after the relaunch."""
    import json

    pytest.importorskip("transformers")
    spec = RunSpec(family="hf_gpt2", seed=0, batch_size=16, scenario=Scenario.BAD_POCKET, guarded=True)
    out = run(spec, workdir=tmp_path)
    assert out.restarts == 1 and out.rollbacks == 1 and not out.halted and out.steps == spec.steps
    ledger = json.loads((tmp_path / "hf" / "ledger.json").read_text())
    (start, stop), = ledger["skip_ranges"]
    assert start <= 240 < stop and ledger["resume_from"] is None   # the pocket: positions 240-259
    assert ledger["last_rollback"]["to_step"] <= start - 100     # rollback_distance (default 100)


def test_the_oracle_control_is_an_unguarded_pocket_run_only():
    """The oracle (the pocket dropped exactly: the floor of "within 2%") is a bad-pocket control."""
    from lossguard.errors import LossguardError

    with pytest.raises(LossguardError, match="oracle"):
        RunSpec(family="mlp", scenario=Scenario.BAD_POCKET, guarded=True, oracle=True)
    with pytest.raises(LossguardError, match="oracle"):
        RunSpec(family="mlp", oracle=True)
    spec = RunSpec(family="mlp", batch_size=128, steps=100, scenario=Scenario.BAD_POCKET, oracle=True)
    dropped, clean = run(spec), run(spec.with_(scenario=Scenario.HEALTHY, oracle=False))
    assert dropped.steps == clean.steps == 100 and dropped.final_val != clean.final_val  # other data, same steps


def test_a_pocket_no_single_step_sees_is_caught_by_the_opt_in_loss_shift_test():
    """The encoder's garbage-token pocket lifts the loss ~2-3 noise units for 20 steps: no step is an
    outlier (the default guard does nothing, +5.7% vs clean, as unguarded). With the loss-shift test
    on, half of 16 steps elevated opens an episode back-dated to the window's start; the rollback
    skips the pocket."""
    from lossguard.guard import GuardConfig
    from lossguard.guard.judge.evidence import EvidenceConfig

    spec = RunSpec(family="encoder", batch_size=16, optimizer=Optim.ADAMW, scenario=Scenario.BAD_POCKET)
    out = run(spec.with_(guarded=True), config=GuardConfig(evidence=EvidenceConfig(shift_z=2.0)))
    assert out.rollbacks >= 1 and not out.halted
    shift = [r for r in out.reasons if r[1] == "skip" and any("loss shift" in x for x in r[2])]
    assert shift, out.reasons
    clean = run(spec.with_(scenario=Scenario.HEALTHY))
    unguarded = run(spec)
    assert out.final_val < unguarded.final_val and out.final_val <= 1.02 * clean.final_val
