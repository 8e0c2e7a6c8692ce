"""The terminal summary: plot of the curve with incident markers, incidents, plan, plain text."""
from __future__ import annotations

import io

import numpy as np

from lossguard.analysis import analyze
from lossguard.report.text import plot, print_text, render_text
from lossguard.runlog import RunLogBuilder


def _analysis():
    rng = np.random.default_rng(2)
    t = np.arange(1, 4001)
    loss = 2 + 8 * t ** -0.4 * (1 + rng.normal(0, 0.004, len(t)))
    loss[t == 2500] *= 2.0
    b = RunLogBuilder("test")
    b.start_segment("mem://run")
    b.add("loss", t, loss)
    return analyze(b.build())


def test_render_text_has_plot_incidents_and_no_colour_codes():
    a = _analysis()
    text = render_text(a, width=80)
    assert "\x1b[" not in text
    assert "1 incident(s):" in text and "spike_fast_recovery" in text and "onset 2500" in text
    lines = text.splitlines()
    frame = next(i for i, line in enumerate(lines) if line.strip().startswith("+---"))
    marker_line = lines[frame + 1]
    # the marker "1" sits in the column of step 2500 (of 1..4000 over 70 columns)
    col = marker_line.index("1") - 10
    assert abs(col - 2500 * 70 // 4000) <= 1


def test_plot_ascii_and_short_series():
    assert plot(np.array([1]), np.array([1.0]), []) == ["(not enough finite points to plot)"]
    lines = plot(np.arange(100), np.linspace(3, 2, 100), [], width=40, height=5, ascii_only=True)
    assert all(ord(ch) < 128 for line in lines for ch in line)
    assert any("#" in line for line in lines)


def test_print_text_to_a_pipe_is_plain():
    buf = io.StringIO()
    print_text(_analysis(), buf)
    assert "Plan:" in buf.getvalue() and "\x1b[" not in buf.getvalue()
