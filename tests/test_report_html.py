"""The HTML report file: structure, self-containment, the data it draws, and its size.

``make_analysis`` builds a known run by hand (three segments with a rollback and a resume, a slow
spike, a NaN, guard actions) so these tests do not depend on the analyser; the browser and PNG tests
reuse it.
"""
from __future__ import annotations

import json
import math
import html
import re

import numpy as np
import pytest

from lossguard import metrics as M
from lossguard.analysis import Analysis
from lossguard.classify.incident import Incident, IncidentKind
from lossguard.errors import LossguardError
from lossguard.plan import RecoveryPlan
from lossguard.report.html import render_html, report_data, write_html
from lossguard.runlog import RunLogBuilder
from lossguard.stitch import stitch


def make_analysis(n: int = 20_000, *, seed: int = 0) -> Analysis:
    """A run of ``n`` steps: launch, rollback at 0.275 n (its own spike superseded), resume at 0.6 n.

    Incidents (ground truth by construction): a 2.3x slow-recovering spike at 0.15 n on the loss,
    and a NaN grad norm at 0.75 n.
    """
    rng = np.random.default_rng(seed)
    steps = np.arange(n, dtype=np.int64)
    loss = 2.5 + 7.5 * np.exp(-steps / (n / 12)) + 0.03 * rng.standard_normal(n)
    grad = 0.4 + 0.05 * rng.standard_normal(n) ** 2
    spike_on, spike_peak, spike_end = int(0.15 * n), int(0.15 * n) + 10, int(0.17 * n)
    base = float(loss[spike_on - 1])
    bump = np.zeros(n)
    bump[spike_on:spike_peak + 1] = np.linspace(0.1, 1.3, spike_peak + 1 - spike_on) * base
    bump[spike_peak + 1:spike_end] = 1.3 * base * np.exp(-np.arange(spike_end - spike_peak - 1) / ((spike_end - spike_peak) / 6))
    loss += bump
    grad[spike_on:spike_peak + 5] *= 8
    nan_at = int(0.75 * n)
    grad[nan_at] = np.nan
    lr = 3e-4 * np.minimum(1, (steps + 1) / (n / 50)) * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * steps / n)))
    scale = np.where(steps < n // 2, 65536.0, 32768.0)

    rollback_at, first_end, resume_at = int(0.275 * n), int(0.30 * n), int(0.60 * n)
    b = RunLogBuilder("csv")
    # Segment 0 runs past the rollback point and diverges there: those points become dead.
    b.start_segment("run/launch0.csv")
    s0 = steps[:first_end]
    l0 = loss[:first_end].copy()
    l0[rollback_at + 50:] *= np.linspace(1.0, 3.0, first_end - rollback_at - 50)
    for name, v in ((M.LOSS, l0), (M.GRAD_NORM, grad[:first_end]), (M.LR, lr[:first_end]), (M.LOSS_SCALE, scale[:first_end])):
        b.add(name, s0, v)
    b.start_segment("run/launch1.csv")
    s1 = steps[rollback_at:resume_at]
    for name, v in ((M.LOSS, loss), (M.GRAD_NORM, grad), (M.LR, lr), (M.LOSS_SCALE, scale)):
        b.add(name, s1, v[rollback_at:resume_at])
    b.start_segment("run/launch2.csv")
    s2 = steps[resume_at:]
    for name, v in ((M.LOSS, loss), (M.GRAD_NORM, grad), (M.LR, lr), (M.LOSS_SCALE, scale)):
        b.add(name, s2, v[resume_at:])
    log = stitch(b.build())

    incidents = [
        Incident(kind=IncidentKind.SPIKE_SLOW, metric=M.LOSS, onset=spike_on, peak=spike_peak, end=spike_end,
                 baseline=base, peak_value=float(loss[spike_peak]), magnitude=float(loss[spike_peak]) - base,
                 magnitude_sigma=40.0, recovery_steps=spike_end - spike_peak, severity="warning",
                 evidence="Loss rose 2.3x over 10 steps and took 390 steps to return to its trend."),
        Incident(kind=IncidentKind.NON_FINITE, metric=M.GRAD_NORM, onset=nan_at, peak=nan_at, end=nan_at + 1,
                 baseline=0.4, peak_value=math.nan, magnitude=math.nan, magnitude_sigma=math.nan,
                 severity="critical", evidence="The gradient norm was NaN for one step."),
    ]
    plans = [
        RecoveryPlan(incident=0, action="rollback", rollback_to_step=spike_on - 100, skip_batches=(spike_on - 100, spike_on + 300),
                     lr_factor=0.5, reasons=["The spike took longer than its recovery budget."]),
        RecoveryPlan(incident=1, action="skip_batches", skip_batches=(nan_at, nan_at),
                     reasons=["A single non-finite step: skipping its batch is enough."]),
    ]
    guard = [{"step": nan_at, "event": "skip", "reason": "non-finite grad norm"},
             {"step": rollback_at + 60, "event": "rollback", "to_step": rollback_at}]
    return Analysis(log=log, incidents=incidents, plans=plans, guard_actions=guard)


def _embedded_data(text: str) -> dict:
    m = re.search(r'<script type="application/json" id="lossguard-data">(.*?)</script>', text, re.S)
    assert m, "the report has no embedded data block"
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def analysis() -> Analysis:
    return make_analysis()


@pytest.fixture(scope="module")
def page(analysis, tmp_path_factory) -> str:
    path = write_html(analysis, tmp_path_factory.mktemp("r") / "report.html", title="toy run")
    return path.read_text(encoding="utf-8")


def test_header_says_what_happened_in_one_line(page, analysis):
    h1 = re.search(r'<h1 id="headline">(.*?)</h1>', page).group(1)
    # The critical one first, then the warning; each with where and how bad.
    assert h1 == "2 incidents: NaN grad_norm at 15000, slow-recovering spike at 3010 (2.3x)"
    assert "<title>toy run" in page
    assert "sev-critical" in page  # the worst severity colours the header
    assert "3 segments (1 resume, 1 rollback)" in page


def test_self_contained_nothing_fetched(page):
    # No external scripts, stylesheets, images or frames: the page must open with no network.
    fetching = re.findall(r'<(?:script|link|img|iframe|source)\b[^>]*\b(?:src|href)\s*=\s*["\']?(?:https?:)?//',
                          page, re.I)
    assert fetching == []
    assert not re.search(r"<script\b[^>]*\bsrc=", page, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?https?:", page, re.I)
    assert "Plotly" in page and "newPlot" in page  # plotly.js itself is inline


def test_embedded_data_matches_the_run(page, analysis):
    data = _embedded_data(page)
    assert [c["metric"] for c in data["charts"]] == [M.LOSS, M.GRAD_NORM, M.LR, M.LOSS_SCALE]
    loss = data["charts"][0]
    roles = [t["role"] for t in loss["traces"]]
    assert roles == ["live", "dead", "incident"]
    # 20k live points > 4 * 2000 buckets: downsampled, except around the incident (full resolution).
    live = loss["traces"][0]
    assert 8000 < len(live["x"]) < 20_000 and live["x"] == sorted(live["x"])
    assert set(range(2900, 3500)) <= set(live["x"])
    assert max(y for y in live["y"] if y is not None) == pytest.approx(
        float(np.nanmax(analysis.log.live(M.LOSS)[1])), rel=1e-5)
    dead = loss["traces"][1]
    dead_steps = [x for x in dead["x"] if x is not None]
    assert dead_steps == list(range(5500, 6000))  # segment 0's points after the rollback to 5500
    inc = loss["traces"][2]
    assert inc["x"] == [3000, 3010, ] and inc["point"] == ["onset", "peak"] and inc["incident"] == [0, 0]
    grad = data["charts"][1]
    nonfinite = next(t for t in grad["traces"] if t["role"] == "nonfinite")
    assert nonfinite["x"] == [15000] and nonfinite["text"] == ["nan at step 15000"]
    assert [s["kind"] for s in data["segments"]] == ["rollback", "resume"]
    assert data["segments"][0]["superseded"] == 4 * 500
    assert [g["event"] for g in data["guard"]] == ["skip", "rollback"]
    assert data["incidents"][0]["plan"] == [
        "Roll back to step 2900 (use the newest checkpoint at or before this step), "
        "skip batches 2900 to 3299 (400 batches), multiply the LR by 0.5."]  # half-open [2900, 3300)
    z0, z1 = data["incidents"][0]["zoom"]
    assert z0 < 3000 and z1 > 3400 and z1 - z0 < 2000  # zoom brackets the incident, not the run


def test_a_million_steps_is_downsampled_but_keeps_the_spike():
    a = make_analysis(1_000_000)
    data = report_data(a)
    live = data["charts"][0]["traces"][0]
    assert len(live["x"]) < 60_000
    peak = a.incidents[0].peak
    i = live["x"].index(peak)
    assert live["y"][i] == pytest.approx(a.incidents[0].peak_value, rel=1e-5)
    # Around the incident the curve is at full resolution, so zooming into it shows every step.
    onset, end = a.incidents[0].onset, a.incidents[0].end
    assert set(range(onset, end + 1)) <= set(live["x"])


def test_size_is_plotly_js_plus_a_small_data_block(page):
    from lossguard.report.html import plotly_bundle

    bundle = plotly_bundle()
    assert bundle in page and len(bundle) < 1_500_000  # the vendored basic bundle, not the 4.8 MB one
    data_bytes = len(re.search(r'id="lossguard-data">(.*?)</script>', page, re.S).group(1))
    assert data_bytes < 1_500_000
    assert len(page) < len(bundle) + data_bytes + 100_000  # template, CSS and app script are small


def test_no_incident_run_has_a_calm_headline(tmp_path):
    a = make_analysis(3000)
    a.incidents, a.plans, a.guard_actions = [], [], []
    text = render_html(a)
    h1 = re.search(r'<h1 id="headline">(.*?)</h1>', text).group(1)
    assert h1.startswith("No incidents: loss ") and "over steps 0\u20132999" in h1
    assert "sev-ok" in text


def test_script_terminators_in_names_cannot_break_the_page():
    a = make_analysis(2000)
    a.incidents[0].evidence = "</script><script>alert(1)</script>"
    text = render_html(a, title="<b>run</b>")
    data = _embedded_data(text)
    assert data["incidents"][0]["evidence"] == "</script><script>alert(1)</script>"
    assert "<title>&lt;b&gt;run&lt;/b&gt;" in text


def test_unwritable_path_is_a_clear_error(analysis, tmp_path):
    with pytest.raises(LossguardError, match="cannot write the HTML report"):
        write_html(analysis, tmp_path / "missing-dir" / "r.html")


def _one_segment(**metrics) -> Analysis:
    b = RunLogBuilder("csv")
    b.start_segment("edge.csv")
    for name, (steps, values) in metrics.items():
        b.add(name.replace("__", "/"), steps, values)
    return Analysis(log=stitch(b.build()), incidents=[])


NONE_JUDGED = "NOT JUDGED: {} finite loss point(s), too few to judge anything (needs 3)"


@pytest.mark.parametrize("metrics, charts, headline", [
    # Logs too short to judge say so, as the terminal does; never a bare "No incidents".
    ({"loss": ([5], [2.0])}, ["loss"], NONE_JUDGED.format(1)),
    ({"loss": (np.arange(100), np.r_[np.full(10, np.nan), np.linspace(3, 2, 80), np.full(10, np.inf)])},
     ["loss"], "NOT FULLY JUDGED: no incident found in 80 points, but the log is too short to judge "),
    ({"loss": (np.arange(9), np.full(9, np.nan))}, ["loss"], NONE_JUDGED.format(0)),
    ({"loss__web": (np.arange(50), np.ones(50)), "loss__code": (np.arange(50), np.ones(50)),
      "grad_norm": (np.arange(50), np.ones(50))}, ["loss/code", "loss/web", "grad_norm"],
     "NOT JUDGED: the log has no loss"),
    ({"val_loss": (np.arange(0, 100, 10), np.ones(10))}, ["val_loss"], "NOT JUDGED: the log has no loss"),
    ({"tokens": (np.arange(10), np.arange(10.0))}, ["tokens"], "NOT JUDGED: the log has no loss"),
])
def test_unusual_runs_still_render(metrics, charts, headline):
    a = _one_segment(**metrics)
    text = render_html(a)
    data = _embedded_data(text)
    assert [c["metric"] for c in data["charts"]] == charts
    assert data["headline"].startswith(headline)
    assert data["severity"] == "info"  # an unjudged log is not marked "ok"
    assert data["range"][1] > data["range"][0]


def test_short_log_headline_is_the_terminals(tmp_path):
    from lossguard.analysis import analyze
    from lossguard.io import read_log
    from lossguard.report.words import health

    path = tmp_path / "short.csv"
    path.write_text("step,loss\n" + "".join(f"{10 * i},{3.0 - 0.01 * i}\n" for i in range(9)))
    a = analyze(read_log(path))
    assert a.incidents == []
    h1 = re.search(r'<h1 id="headline">(.*?)</h1>', render_html(a)).group(1)
    assert h1 == html.escape(health(a).headline)
    assert h1.startswith("NOT FULLY JUDGED: no incident found in 9 points, but the log is too short to judge ")
