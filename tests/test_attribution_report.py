"""The named samples are shown: ``analyze`` (terminal and HTML data) lists them under their incident,
with what the user's render function says they are; the guard's halt diagnosis lists them too."""
from __future__ import annotations

import json

import numpy as np
import pytest

from lossguard.analysis import analyze
from lossguard.io import read_log
from lossguard.recovery.suspects import by_incident, describe, suspect_records
from lossguard.report.html import report_data
from lossguard.report.text import render_text


def _guard_log(path, spike_at=(400,)):
    """A guard-shaped JSONL log: 600 steps of a noisy falling loss, a withheld spike at each
    ``spike_at`` with its skip and suspects records, and a naming that found nobody at step 100."""
    rng = np.random.default_rng(0)
    lines = []
    for s in range(600):
        loss = 2.0 * np.exp(-s / 300) + 0.5 + 0.01 * rng.standard_normal()
        if s in spike_at:
            loss *= 4.0
            lines.append({"step": s, "event": "suspects", "batch_index": s, "named": True, "method": "loss",
                          "suspects": [{"id": 9000 + s, "rank": 0, "row": 3, "share": 0.93, "loss": 40.0,
                                        "shows": "4000 tokens, token 211 x4000"},
                                       {"id": {"dataset": "code", "index": 7}, "rank": 1, "row": 0, "share": 0.05}],
                          "share": 0.98})
            lines.append({"step": s, "event": "skip", "batch_index": s, "reasons": ["loss outlier"]})
        if s == 100:
            lines.append({"step": s, "event": "suspects", "batch_index": s, "named": False, "suspects": [],
                          "why": "no sample stands out: the excess is spread over the batch"})
        lines.append({"step": s, "loss": float(loss)})
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def test_analyze_lists_the_named_samples_under_their_incident(tmp_path):
    log = read_log(_guard_log(tmp_path / "run.jsonl"))
    a = analyze(log)
    records = suspect_records(a.guard_actions)
    assert [r["step"] for r in records] == [100, 400]
    named, rest = by_incident(records, a.incidents)
    owner = next(i for i, inc in enumerate(a.incidents) if inc.onset - 1 <= 400 <= (inc.end or inc.peak) + 1)
    assert [r["step"] for r in named[owner]] == [400] and [r["step"] for r in rest] == [100]
    text = render_text(a)
    assert "Samples the guard named (2 withheld step(s)" in text
    assert "step 400: 9400 (93%) \u201c4000 tokens, token 211 x4000\u201d, code:7 (5%) [loss]" in text
    assert "step 100: nobody named (no sample stands out" in text
    data = report_data(a)
    assert data["incidents"][owner]["suspects"] == [describe(named[owner][0])]
    assert data["suspects"] == [describe(rest[0])]
    json.dumps(data, allow_nan=False)


def test_cli_analyze_prints_them(tmp_path, capsys):
    from lossguard.cli import main

    assert main(["analyze", str(_guard_log(tmp_path / "run.jsonl"))]) == 0
    assert "9400 (93%)" in capsys.readouterr().out


def test_halt_diagnosis_names_the_samples(tmp_path):
    torch = pytest.importorskip("torch")
    from lossguard.data.sampler import ResumableSampler
    from lossguard.guard import GuardConfig, SampleAttribution, StabilityGuard, TrainingHalted
    from evals.planted import PlantedBags, bag_classifier, batch_loss, pad_collate, per_row_loss
    from evals.planted_loop import GLOBAL_BATCH, N_SAMPLES, SEED, planted_ids

    torch.set_num_threads(1)
    sampler = ResumableSampler(N_SAMPLES, batch_size=GLOBAL_BATCH, seed=SEED)
    loader = torch.utils.data.DataLoader(PlantedBags(N_SAMPLES, planted=planted_ids()), batch_sampler=sampler,
                                         collate_fn=pad_collate)
    model = bag_classifier(dropout=0.1)
    guard = StabilityGuard(model, torch.optim.AdamW(model.parameters(), lr=3e-3), sampler=sampler,
                           config=GuardConfig(checkpoint_every=None, loss_rise=None), log_path=tmp_path / "g.jsonl",
                           attribution=SampleAttribution(per_sample_loss=per_row_loss))
    with pytest.raises(TrainingHalted):  # the planted episode at 303-309 needs a rollback; no store
        for _, batch in guard.batches(loader, steps=330):
            loss = batch_loss(model, batch)
            loss.backward()
            guard.step(loss)
    diag = (tmp_path / "g.halt.txt").read_text()
    assert "Samples named on withheld steps" in diag
    for rec in guard.namer.records[-3:]:
        assert describe(rec) in diag
    assert {s["id"] for r in guard.namer.records for s in r["suspects"]} <= set(planted_ids())
