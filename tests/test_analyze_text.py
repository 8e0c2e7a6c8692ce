"""The terminal summary: health headline first, incidents needing action with their plans, one-step
outliers in one line, the plot with markers, plain text."""
from __future__ import annotations

import io

import numpy as np

from lossguard.analysis import analyze
from lossguard.report.text import plot, print_text, render_text
from lossguard.runlog import RunLogBuilder


def _log(loss, t=None):
    t = np.arange(1, len(loss) + 1) if t is None else t
    b = RunLogBuilder("test")
    b.start_segment("mem://run")
    b.add("loss", t, loss)
    return b.build()


def _curve(n=4000, seed=2, noise=0.004):
    rng = np.random.default_rng(seed)
    t = np.arange(1, n + 1)
    return t, 2 + 8 * t ** -0.4 * (1 + rng.normal(0, noise, len(t)))


def _slow_spike_analysis():
    t, loss = _curve()
    # a spike at 2500 that takes ~600 steps to decay back: needs a rollback
    after = t >= 2500
    loss[after] += 1.2 * np.exp(-(t[after] - 2500) / 150.0)
    return analyze(_log(loss, t))


def test_unhealthy_run_puts_the_incident_and_its_plan_first_and_marks_the_plot():
    a = _slow_spike_analysis()
    text = render_text(a, width=80)
    assert "\x1b[" not in text
    lines = text.splitlines()
    head = next(line for line in lines if line.startswith(("HEALTHY", "UNHEALTHY", "NOT FULLY")))
    assert head.startswith("UNHEALTHY: 1 incident(s) need action: slow-recovering spike at 2500")
    assert "Needs action (1):" in text and "spike_slow_recovery" in text and "onset 2500" in text
    assert "plan: rollback" in text
    frame = next(i for i, line in enumerate(lines) if line.strip().startswith("+---"))
    col = lines[frame + 1].index("1") - 10
    assert abs(col - 2500 * 70 // 4000) <= 1  # the marker sits in the column of step 2500 (of 70)


def test_healthy_run_groups_one_step_outliers_in_one_line():
    t, loss = _curve(8000, seed=5)
    bad = np.arange(300, 7800, 133)            # 57 single bad batches, each back on the next step
    loss[bad] *= 1.3 + 0.005 * np.arange(len(bad))
    a = analyze(_log(loss, t))
    text = render_text(a, width=80)
    assert len(a.incidents) == len(bad)        # the detail stays in the analysis (and --json)
    head = next(line for line in text.splitlines() if line.startswith(("HEALTHY", "UNHEALTHY")))
    assert head.startswith(f"HEALTHY: {len(bad)} one-step outlier(s), nothing to do")
    grouped = [line for line in text.splitlines() if "one-step outlier(s), each back" in line]
    assert len(grouped) == 1 and f"at step {int(t[bad[-1]])}" in grouped[0] and "and 47 more" in grouped[0]
    assert "Needs action" not in text and len(text.splitlines()) < 30


def test_a_short_log_is_never_a_bare_no_incidents():
    a = analyze(_log(np.array([3.1, 3.0, 3.05, 2.98])))
    text = render_text(a)
    assert "No incidents" not in text
    assert "NOT FULLY JUDGED: no incident found in 4 points" in text
    assert "4 points: too short to judge" in text and "level shifts (needs" in text


def test_plot_ascii_and_short_series():
    assert plot(np.array([1]), np.array([1.0]), []) == ["(not enough finite points to plot)"]
    lines = plot(np.arange(100), np.linspace(3, 2, 100), [], width=40, height=5, ascii_only=True)
    assert all(ord(ch) < 128 for line in lines for ch in line)
    assert any("#" in line for line in lines)


def test_print_text_to_a_pipe_is_plain():
    buf = io.StringIO()
    print_text(_slow_spike_analysis(), buf)
    assert "plan:" in buf.getvalue() and "\x1b[" not in buf.getvalue()


def test_skip_ranges_print_half_open_without_ambiguity():
    from lossguard.recovery import SkipRange
    from lossguard.report.words import skip_phrase

    assert skip_phrase(SkipRange(start=2900, stop=3300)) == "batches 2900 to 3299 (400 batches)"
    assert skip_phrase(SkipRange(start=7, stop=8)) == "batch 7"
    assert skip_phrase(SkipRange(start=5, stop=5)) == "no batches"
