"""Planted bad samples in a 120k-sample dataset, a tiny classifier that really trains: every spike
they cause names them (recall >= 90%, precision >= 80%), the skip list keeps them out after a
rollback, after a SIGKILL and resume, and after a relaunch on another world size; naming itself
changes nothing in the run (bitwise)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from lossguard.data.skiplist import SkipList  # noqa: E402
from evals.planted import score_naming  # noqa: E402
from evals.planted_loop import N_SAMPLES, planted_ids, train  # noqa: E402

STEPS = 330


def _trace(path) -> list[dict]:
    return [json.loads(line) for line in open(path)]


def _never_again(trace: list[dict], named: set[int]) -> None:
    """Each named sample appears in the trace up to the step that named it, never after."""
    for sid in named:
        at = [k for k, rec in enumerate(trace) if sid in rec["ids"]]
        assert len(at) == 1, f"sample {sid} delivered again after it was named (trace lines {at})"


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    """The 1-rank run that names its samples (its result and its directory): the first test checks
    it, the world-size test seeds its relaunches with its skip list (one run, trained once)."""
    torch.set_num_threads(1)
    tmp_path = tmp_path_factory.mktemp("planted")
    return train(steps=STEPS, ckpt_dir=tmp_path / "named", trace=tmp_path / "named.jsonl"), tmp_path


def test_planted_samples_are_named_kept_out_after_a_rollback_and_naming_changes_nothing(named):
    torch.set_num_threads(1)
    assert N_SAMPLES >= 100_000
    planted = planted_ids()
    run, tmp_path = named
    score = score_naming(run["spikes"], run["suspects"], planted)
    print(f"planted: {len(planted)}, in withheld batches: {len(score['caught']) + len(score['missed'])}, "
          f"recall {score['recall']:.2f}, precision {score['precision']:.2f} (in spikes with a planted sample "
          f"{score['precision_planted']:.2f}); clean-data names {score['natural']}")
    assert score["recall"] >= 0.9 and score["precision"] >= 0.8
    assert len(score["caught"]) >= 5  # the test means something: most plants did cause a spike
    assert run["rollbacks"] >= 1
    named = set(score["caught"]) | set(score["false"])
    assert set(run["skiplist"]) == named
    trace = _trace(tmp_path / "named.jsonl")
    _never_again(trace, named)
    # the ledger has each naming, the skip list file each named sample
    ledger = json.loads((tmp_path / "named" / "ledger.json").read_text())
    assert {s["id"] for r in ledger["history"] if r["event"] == "suspects" for s in r["suspects"]} == named
    assert {k.index for k in SkipList.load(tmp_path / "named" / "skiplist.json").keys()} == named

    # the same run without naming: bitwise the same until the rollback (the replays left weights,
    # optimizer, RNG and data untouched); after it, it meets the rewound poison again
    plain = train(steps=STEPS, ckpt_dir=tmp_path / "plain", trace=tmp_path / "plain.jsonl", attribution=False)
    ref = _trace(tmp_path / "plain.jsonl")
    first_rb = next(k for k in range(1, len(trace)) if trace[k]["step"] <= trace[k - 1]["step"])
    assert ref[:first_rb] == trace[:first_rb]
    again = [s for s, _, ids in plain["spikes"] if set(ids) & set(planted)]
    assert len(again) >= len(run["spikes"]), "without the skip list the rewound run meets its poison again"


def _cmd(ckpt, trace, *extra):
    return [sys.executable, "-m", "evals.planted_loop", "--steps", str(STEPS), "--ckpt-dir", str(ckpt),
            "--trace", str(trace), *extra]


@pytest.mark.slow  # four interpreter starts and ~900 training steps: ~40 s on a busy machine
def test_skiplist_survives_sigkill_and_resume(tmp_path):
    planted = set(planted_ids())
    # 1. a run names its samples and is SIGKILLed 3 steps after the first naming; the relaunch
    #    resumes from a checkpoint before that naming and never meets the named sample again
    first = subprocess.run(_cmd(tmp_path / "k", tmp_path / "k.jsonl", "--kill-at", "123"), timeout=300)
    assert first.returncode == -9
    listed = {k.index for k in SkipList.load(tmp_path / "k" / "skiplist.json").keys()}
    assert listed and listed <= planted
    subprocess.run(_cmd(tmp_path / "k", tmp_path / "k.jsonl"), check=True, timeout=300)
    trace = _trace(tmp_path / "k.jsonl")
    resumed_at = next(k for k in range(1, len(trace)) if trace[k]["step"] <= trace[k - 1]["step"])
    assert trace[resumed_at]["step"] < 120  # the resume re-reads the batch the sample was named in
    _never_again(trace, {k.index for k in SkipList.load(tmp_path / "k" / "skiplist.json").keys()})

    # 2. with a given skip list, killed and resumed == uninterrupted, bitwise
    seed = tmp_path / "k" / "skiplist.json"
    subprocess.run(_cmd(tmp_path / "a", tmp_path / "a.jsonl", "--skiplist", str(seed)), check=True, timeout=300)
    b = subprocess.run(_cmd(tmp_path / "b", tmp_path / "b.jsonl", "--skiplist", str(seed), "--kill-at", "212"),
                       timeout=300)
    assert b.returncode == -9
    subprocess.run(_cmd(tmp_path / "b", tmp_path / "b.jsonl", "--skiplist", str(seed)), check=True, timeout=300)
    curve = lambda rows: {r["step"]: (r["loss"], r["ids"]) for r in rows}  # noqa: E731 (the last record wins)
    a_rows, b_rows = _trace(tmp_path / "a.jsonl"), _trace(tmp_path / "b.jsonl")
    assert curve(a_rows) == curve(b_rows) and len(curve(a_rows)) == STEPS
    seeded = {k.index for k in SkipList.load(seed).keys()}
    assert not any(set(r["ids"]) & seeded for r in a_rows + b_rows)


def _ranked(rank, world, ckpt, seed, steps, trace):
    torch.set_num_threads(1)
    run = train(steps=steps, ckpt_dir=ckpt, seed_skiplist=seed, trace=trace)
    return {k: run[k] for k in ("losses", "spikes", "suspects", "skiplist")}


def _ranked_runs(rank, world, runs):
    """Several runs one after another in one launch (each :func:`_ranked`; ``train`` seeds the model,
    its dropout and the sampler afresh): one 2-rank process group instead of one per run."""
    return [_ranked(rank, world, *run) for run in runs]


@pytest.mark.slow  # two 2-rank gloo launches and ~1,300 steps on 2 ranks: ~60 s
def test_skiplist_carries_over_to_another_world_size_and_names_agree_on_two_ranks(tmp_path, named):
    from lossguard.testing.distributed import run_distributed

    planted = planted_ids()
    one, named_dir = named  # the 1-rank run the first test checks, and its skip list
    seed = named_dir / "named" / "skiplist.json"
    listed = {k.index for k in SkipList.load(seed).keys()}
    # One launch: (a) two ranks name the planted samples too, (b) the 1-rank run's list relaunched on
    # 2 ranks for the whole run, (c) the same, stopped after step 150.
    two, res, _ = zip(*run_distributed(_ranked_runs, world_size=2, args=([
        (str(tmp_path / "two"), None, STEPS, str(tmp_path / "t2.jsonl")),
        (str(tmp_path / "r"), str(seed), STEPS, str(tmp_path / "r.jsonl")),
        (str(tmp_path / "s"), str(seed), 150, str(tmp_path / "s.jsonl"))],), timeout=600), strict=True)
    # (a) each rank replays its half; the findings are gathered
    assert two[0]["skiplist"] == two[1]["skiplist"]
    score = score_naming(two[0]["spikes"], two[0]["suspects"], planted)
    print(f"2 ranks: in withheld batches {len(score['caught']) + len(score['missed'])}, recall {score['recall']:.2f}, "
          f"precision {score['precision']:.2f} (in spikes with a planted "
          f"sample {score['precision_planted']:.2f}); clean-data names {score['natural']}")
    assert score["recall"] >= 0.9 and score["precision"] >= 0.8
    # (b) no rank ever gets a listed sample, and the spikes those samples caused do not happen
    rows = _trace(tmp_path / "r.jsonl")
    assert len(rows) >= STEPS and not any(set(r["ids"]) & listed for r in rows)
    assert not any(set(ids) & listed for _, _, ids in res[0]["spikes"])
    assert len(res[0]["spikes"]) < len(one["spikes"])
    # (c) relaunched on 2 fresh ranks with that list, the stopped run is bitwise the uninterrupted one
    run_distributed(_ranked, world_size=2, args=(str(tmp_path / "s"), str(seed), STEPS, str(tmp_path / "s.jsonl")),
                    timeout=600)
    curve = lambda rows: {r["step"]: (r["loss"], r["ids"]) for r in rows}  # noqa: E731
    assert curve(_trace(tmp_path / "s.jsonl")) == curve(rows)
