"""The live guard's repeated-data test (``recovery/resume_watch.py``) is the analyser's level test at a
resume, fed one loss at a time: at every resume of generated per-step runs of every kind (their
clean resumes and rollbacks included), the watch reports repeated data exactly where the analyser
files a repeated-data finding, at the same step and onset, and nowhere else. Torch-free."""
from __future__ import annotations

import numpy as np

from lossguard.analysis import analyze
from lossguard.plan import findings
from lossguard.recovery.resume_watch import ResumeWatch
from lossguard.stitch import stitch
from evals.agreement import shifted
from evals.synthetic import GENERATED_KINDS, generate_run


def _watch(log) -> list[tuple[int, int]]:
    """(step, onset) of every finding of a ResumeWatch fed the log's live loss, resumed where the log
    resumed (the guard's restore loads the history saved in the checkpoint: ``load_state_dict``)."""
    steps, loss = log.live("loss")
    resumes = {int(g.first_step) for g in log.segments[1:]}
    w, out = ResumeWatch(), []
    for s, v in zip(steps, loss, strict=True):
        if int(s) in resumes:
            w.load_state_dict(w.state_dict())  # the checkpoint at the resume holds this history
        f = w.update(int(s), float(v))
        if f is not None:
            out.append((f.step, f.onset))
    return out


def test_the_watch_finds_repeated_data_where_the_analyser_does_at_every_resume():
    found, quiet = 0, 0
    for kind in (None, *GENERATED_KINDS):
        for seed in (3, 4):
            run = generate_run(kind, seed=seed, length=1200, log_every=1)
            log = stitch(shifted(run.log, int(min(s.steps.min() for s in run.log.series.values()))))
            expected = sorted((f.step, f.onset) for f in findings(analyze(log).incidents)
                              if f.kind == "repeated_data")
            got = _watch(log)
            assert got == expected, (kind, seed)
            found += len(got)
            quiet += len(log.segments) - 1 - len(got)
    assert found >= 2 and quiet >= 5  # both answers are exercised


def test_the_finding_comes_when_the_evidence_is_complete_and_not_before():
    rng = np.random.default_rng(0)
    w = ResumeWatch()
    h = w.cfg.level_points
    for s in range(200):
        assert w.update(s, 2.0 + 0.01 * rng.standard_normal()) is None
    w.load_state_dict(w.state_dict())  # resume at step 200: the data restarts, the loss is 10% low
    got = [w.update(200 + i, 1.8 + 0.01 * rng.standard_normal()) for i in range(3 * h)]
    assert [i for i, f in enumerate(got) if f is not None] == [h - 1]
    f = got[h - 1]
    assert f is not None and (f.kind, f.onset, f.step) == ("repeated_data", 200, 200 + h - 1)
    assert w.update(300, float("nan")) is None  # a non-finite loss is not evidence


def test_no_finding_without_a_resume_or_without_history():
    w = ResumeWatch()
    assert all(w.update(s, 2.0 if s < 100 else 1.5) is None for s in range(200))  # never resumed
    w = ResumeWatch()
    w.load_state_dict(None)  # a checkpoint from before the watch: no history to compare with
    assert w.armed and all(w.update(s, 1.5) is None for s in range(50))
