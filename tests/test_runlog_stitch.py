"""RunLogBuilder checks and stitching against hand-computed answers."""
from __future__ import annotations

import numpy as np
import pytest

from lossguard.errors import LogFormatError
from lossguard.runlog import RunLogBuilder, merge
from lossguard.stitch import stitch


def _build(segments):
    """segments: list of (source, start_time, {metric: (steps, values)})."""
    b = RunLogBuilder("test")
    for source, start_time, metrics in segments:
        b.start_segment(source, start_time=start_time)
        for name, (steps, values) in metrics.items():
            b.add(name, steps, values, where=np.arange(len(steps)) + 2)
    return b.build()


def test_rollback_marks_superseded_points_dead():
    log = stitch(_build([
        ("a.csv", 1.0, {"loss": (np.arange(0, 1000), np.linspace(5, 3, 1000))}),
        ("b.csv", 2.0, {"loss": (np.arange(900, 1500), np.linspace(3.1, 2.8, 600))}),
    ]))
    s = log.series["loss"]
    assert log.segments[1].kind == "rollback"
    assert log.segments[1].superseded == 100  # steps 900..999 of the first launch
    assert int((~s.alive).sum()) == 100
    steps, values = s.live()
    assert np.array_equal(steps, np.arange(0, 1500))
    assert values[950] == pytest.approx(np.linspace(3.1, 2.8, 600)[50])


def test_resume_after_rollback_does_not_double_count():
    # A: 0..999, B rolls back to 500 and reaches 799, C resumes at 800: only B supersedes.
    log = stitch(_build([
        ("a", 1.0, {"loss": (np.arange(0, 1000), np.ones(1000))}),
        ("b", 2.0, {"loss": (np.arange(500, 800), np.ones(300))}),
        ("c", 3.0, {"loss": (np.arange(800, 1200), np.ones(400))}),
    ]))
    assert [g.kind for g in log.segments] == ["start", "rollback", "resume"]
    assert [g.superseded for g in log.segments] == [0, 500, 0]
    assert np.array_equal(log.live("loss")[0], np.arange(0, 1200))


def test_wall_time_orders_sources_when_every_source_has_it():
    # Given in the wrong order; the rollback (c, started last) starts below b's first step.
    log = stitch(_build([
        ("c", 3.0, {"loss": (np.arange(900, 1100), np.full(200, 2.0))}),
        ("a", 1.0, {"loss": (np.arange(0, 1000), np.full(1000, 3.0))}),
        ("b", 2.0, {"loss": (np.arange(1000, 2000), np.full(1000, 2.5))}),
    ]))
    assert [g.source for g in log.segments] == ["a", "b", "c"]
    assert log.segments[2].superseded == 100 + 1000  # a's 900..999 and all of b
    steps, values = log.live("loss")
    assert steps[-1] == 1099 and np.all(values[steps >= 900] == 2.0)


def test_nonfinite_values_are_kept():
    log = _build([("a", None, {"loss": ([1, 2, 3], [1.0, float("nan"), float("inf")])})])
    summary = stitch(log).summary()["metrics"]["loss"]
    assert (summary["nan"], summary["inf"], summary["first_nonfinite_step"]) == (1, 1, 2)


@pytest.mark.parametrize("steps, message", [([1, 2, 2], "duplicate step 2"), ([1, 3, 2], "backwards")])
def test_bad_order_inside_a_segment_names_the_line(steps, message):
    with pytest.raises(LogFormatError) as exc:
        _build([("run.csv", None, {"loss": (steps, [1.0, 1.0, 1.0])})])
    text = str(exc.value)
    assert message in text and "run.csv" in text and "line 4" in text and "fix:" in text


def test_empty_log_is_an_error():
    b = RunLogBuilder("test")
    b.start_segment("empty.csv")
    with pytest.raises(LogFormatError, match="no numeric metric"):
        b.build()


def test_merge_keeps_segments_of_every_file():
    a = _build([("a", 1.0, {"loss": ([0, 1], [2.0, 1.0])})])
    b = _build([("b", 2.0, {"loss": ([1, 2], [1.5, 0.5])}, )])
    log = stitch(merge([a, b]))
    assert len(log.segments) == 2 and log.summary()["dead_points"] == 1


def test_bookkeeping_at_step_zero_does_not_move_the_rollback_point():
    """Lightning writes hp_metric at step 0 at the start of every fit: a resume from step 40 stays a
    rollback to 40 (not to 0), and the re-logged step-0 value replaces the earlier one."""
    log = stitch(_build([
        ("a", 1.0, {"loss": (np.arange(1, 50), np.full(49, 2.0)), "hp_metric": ([0], [-1.0]),
                    "epoch": (np.arange(1, 50), np.zeros(49))}),
        ("b", 2.0, {"loss": (np.arange(41, 61), np.full(20, 1.0)), "hp_metric": ([0], [-1.0]),
                    "epoch": (np.arange(41, 61), np.ones(20))}),
    ]))
    assert [g.kind for g in log.segments] == ["start", "rollback"]
    assert log.live("loss")[0].tolist() == list(range(1, 61))
    assert log.live("epoch")[0].tolist() == list(range(1, 61))
    assert log.live("hp_metric")[0].tolist() == [0]
    assert log.segments[1].superseded == 9 + 9 + 1  # loss and epoch 41-49, the old hp_metric


def test_segment_without_main_metrics_uses_every_metric():
    log = stitch(_build([
        ("a", 1.0, {"custom": (np.arange(0, 10), np.zeros(10))}),
        ("b", 2.0, {"custom": (np.arange(5, 15), np.ones(10))}),
    ]))
    assert log.segments[1].kind == "rollback" and log.segments[1].superseded == 5


def test_stitch_adds_only_the_alive_flags():
    """A multi-million-point log: stitch must not copy its columns (it once concatenated every main
    metric's steps and segment labels to find where segments start)."""
    import tracemalloc

    n = 1_000_000
    log = _build([
        ("a", 1.0, {"loss": (np.arange(n), np.ones(n)), "lr": (np.arange(n), np.ones(n)),
                    "grad_norm": (np.arange(n), np.ones(n))}),
        ("b", 2.0, {"loss": (np.arange(n - 1000, n + 1000), np.ones(2000)),
                    "lr": (np.arange(n - 1000, n + 1000), np.ones(2000))}),
    ])
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        out = stitch(log)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert out.segments[1].kind == "rollback" and out.segments[1].superseded == 3000  # 1,000 of each metric
    assert out.series["loss"].segment is log.series["loss"].segment  # already in time order: shared
    # alive flags (1 byte a point, 3 series) plus one rollback's boolean masks; a copied int64 step
    # column of one metric alone would be 8 MB.
    assert peak < 3 * n + 4 * n, f"stitch allocated {peak / 1e6:.1f} MB"


def test_segment_spans_when_the_files_were_given_out_of_time_order():
    """The later launch's file read first: segment labels are renumbered, spans follow them."""
    late = _build([("b", 2.0, {"loss": (np.arange(50, 120), np.ones(70)), "hp_metric": (np.array([0]), np.ones(1))})])
    early = _build([("a", 1.0, {"loss": (np.arange(0, 100), np.ones(100))})])
    log = stitch(merge([late, early]))
    assert [g.source for g in log.segments] == ["a", "b"]
    assert [(g.first_step, g.last_step) for g in log.segments] == [(0, 99), (50, 119)]  # hp_metric's 0 ignored
    assert log.segments[1].superseded == 50
    assert log.series["loss"].segment.tolist() == [1] * 70 + [0] * 100
