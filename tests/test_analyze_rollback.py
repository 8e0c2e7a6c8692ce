"""Stitched runs: a rollback over a spike is not repeated data; a restarted data stream is."""
from __future__ import annotations

import numpy as np

from lossguard.analysis import analyze
from lossguard.classify.incident import IncidentKind as K
from lossguard.runlog import RunLogBuilder


def _curve(t, rng):
    return 2 + 8 * t ** -0.4 * (1 + rng.normal(0, 0.004, len(t)))


def _two_launches(first, second):
    b = RunLogBuilder("test")
    for i, (t, y) in enumerate((first, second)):
        b.start_segment(f"mem://launch{i}", start_time=1000.0 * i)
        b.add("loss", t, y)
    return b.build()


def test_rollback_over_a_spike_is_a_note_not_an_incident():
    rng = np.random.default_rng(5)
    t1 = np.arange(1, 3001)
    y1 = _curve(t1, rng)
    y1[t1 >= 2500] *= 1.25 + 0.6 * np.exp(-(t1[t1 >= 2500] - 2500) / 400)  # first pass went bad
    t2 = np.arange(2300, 6001)
    a = analyze(_two_launches((t1, y1), (t2, _curve(t2, rng))))
    assert a.log.segments[1].kind == "rollback"
    assert not a.of_kind(K.REPEATED_DATA)
    assert a.incidents == []
    assert any("removed an excursion" in n for n in a.notes)


def test_restarted_data_stream_after_resume_is_repeated_data():
    rng = np.random.default_rng(6)
    t1 = np.arange(1, 3001)
    t2 = np.arange(3001, 6001)
    y2 = _curve(t2, rng)
    y2[:400] *= 0.9  # the first 400 steps after the resume replay memorised data
    a = analyze(_two_launches((t1, _curve(t1, rng)), (t2, y2)))
    (rep,) = a.of_kind(K.REPEATED_DATA)
    assert rep.onset == 3001 and rep.end is not None and abs(rep.end - 3401) <= 20
    assert not a.of_kind(K.LEVEL_SHIFT, K.SPIKE_FAST, K.SPIKE_SLOW, K.DIVERGENCE)
    plan = a.plans[a.incidents.index(rep)]
    # The policy's whole-log rule (recovery/finding.py): back to the checkpoint the resume used. A
    # resume starts from a checkpoint at its first step (simulate assumes one there, in the guard's
    # numbering), and the decision comes when the level test has its evidence: 16 points after it.
    assert plan.action == "rollback" and plan.rollback_to_step == 3001 and plan.step == 3016
