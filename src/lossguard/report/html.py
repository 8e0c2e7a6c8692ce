"""The HTML report: one self-contained file that opens offline and shows what happened to a run.

The Python side turns an :class:`~lossguard.analysis.Analysis` into a small JSON document (curves
downsampled with :mod:`lossguard.report.downsample`, incidents, plans in words, segment boundaries,
the guard's actions) and pours it, plotly.js and a short script (``assets/report.js``) into
``assets/report.html``. Nothing is fetched when the file is viewed.

Why plotly.js, and its *basic* bundle: plotly.js gives zoom, pan, hover, log axes and SVG shapes out of
the box, and draws ~10k points per chart without effort; its SVG output is what the browser tests
inspect. The basic bundle (npm ``plotly.js-basic-dist-min`` 4.1.1, MIT, scatter/bar/pie only; we
draw only scatter) is vendored as ``assets/plotly-basic.min.js``: 1.2 MB instead of the 4.8 MB full
bundle in the ``plotly`` wheel, which made a 1,000,000-step report open ~2.5x faster in headless
Chromium (``benchmarks/RESULTS.md``). If the vendored file is missing, the full bundle from the
``plotly`` package (``pip install 'lossguard[report]'``) is used instead.
"""
from __future__ import annotations

import html
import json
import math
import re
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis import Analysis
from ..errors import LossguardError, require
from ..recovery import Severity
from .. import metrics as M
from .downsample import downsample
from ..recovery.suspects import by_incident, describe, suspect_records
from .words import KIND_STYLE, describe_plan, headline, incident_summary, not_judged, run_facts

BUCKETS = 2000
"""Step buckets per curve for the overview: 4 points each (M4) plus isolated spikes, so <= ~10k points."""
WINDOW_MAX_STEPS = 40_000
"""Around each incident the curve is kept at full resolution over at most this many steps."""

PLOTLY_ASSET = "plotly-basic.min.js"
"""The vendored plotly.js bundle (npm plotly.js-basic-dist-min 4.1.1, MIT; licence beside it)."""

_PLACEHOLDER = re.compile(r"{{(\w+)}}")


def chart_metrics(analysis: Analysis) -> list[str]:
    """The metrics that get a chart, in display order: loss, loss streams, grad norm, LR, loss scale."""
    have = set(analysis.log.series)
    streams = sorted(m for m in have if M.stream_of(m) is not None)
    order = [M.LOSS, *streams, M.GRAD_NORM, M.LR, M.LOSS_SCALE]
    chosen = [m for m in order if m in have]
    if M.VAL_LOSS in have and M.LOSS not in have:
        chosen.insert(0, M.VAL_LOSS)
    return chosen or sorted(have)[:1]


def _clean(a: np.ndarray) -> list[float | None]:
    """Floats for JSON with 6 significant digits (plenty for a chart; keeps the file small), non-finite as null."""
    return [float(f"{v:.6g}") if math.isfinite(v) else None for v in a.tolist()]


def _zoom(inc, first: int, last: int, interval: int) -> tuple[float, float]:
    """The step range a click on the incident zooms to: the episode plus context on both sides.

    A spike that never recovered is shown well past its peak, so the new level is visible. The
    range is at least ~60 logged points wide.
    """
    z1 = inc.end if inc.end is not None else min(last, inc.peak + max(5 * (inc.peak - inc.onset), 60 * interval))
    width = max(z1 - inc.onset, 60 * interval)
    return max(first, inc.onset - 1.5 * width), min(last, z1 + 1.5 * width)


def _window(zoom: tuple[float, float], peak: int) -> tuple[int, int]:
    """The step range drawn at full resolution for an incident: its zoom range, capped in width."""
    lo, hi = int(math.floor(zoom[0])), int(math.ceil(zoom[1]))
    if hi - lo > WINDOW_MAX_STEPS:
        lo, hi = max(lo, peak - WINDOW_MAX_STEPS // 2), min(hi, peak + WINDOW_MAX_STEPS // 2)
    return lo, hi


def _value_at(steps: np.ndarray, values: np.ndarray, step: int) -> float:
    """The value at ``step`` (or the nearest logged step before it)."""
    if not len(steps):
        return math.nan
    i = int(np.clip(np.searchsorted(steps, step, side="right") - 1, 0, len(steps) - 1))
    return float(values[i])


def _chart(analysis: Analysis, metric: str, keep_steps: list[int], windows: list[tuple[int, int]]) -> dict[str, Any]:
    """One chart's traces: live curve, superseded points, NaN markers, incident markers."""
    log = analysis.log
    series = log.series[metric]
    steps, values = series.live()
    finite = np.isfinite(values)
    # Loss curves start with a plunge from ~ln(vocab); fitting the whole-run y axis to it squeezes
    # every later spike flat. Like TensorBoard's "ignore outliers in chart scaling", the whole-run
    # view fits the y axis after the first 3% of steps (the browser does the fitting).
    fit_after = int(steps[0] + 0.03 * (steps[-1] - steps[0])) if M.is_loss(metric) and len(steps) else None
    shown = finite & (steps >= fit_after) if fit_after is not None else finite
    # NaN/Inf markers sit at the top of the visible curve (they have no value of their own).
    top = float(values[shown].max()) if shown.any() else (float(values[finite].max()) if finite.any() else 1.0)
    traces: list[dict[str, Any]] = []

    kept = downsample(steps, values, buckets=BUCKETS, keep_steps=keep_steps, keep_ranges=windows)
    traces.append({"role": "live", "name": metric, "x": steps[kept].tolist(), "y": _clean(values[kept])})

    if not series.alive.all():  # superseded points, one broken line per segment they came from
        xs: list[int | None] = []
        ys: list[float | None] = []
        dead = ~series.alive
        for seg in np.unique(series.segment[dead]):
            sel = dead & (series.segment == seg)
            s, v = series.steps[sel], series.values[sel]
            k = downsample(s, v, buckets=BUCKETS // 2)
            xs += s[k].tolist() + [None]
            ys += _clean(v[k]) + [None]
        traces.append({"role": "dead", "name": "superseded by rollback", "x": xs[:-1], "y": ys[:-1]})

    if metric == M.LOSS and M.VAL_LOSS in log.series:
        vs, vv = log.series[M.VAL_LOSS].live()
        k = downsample(vs, vv, buckets=BUCKETS)
        traces.append({"role": "val", "name": M.VAL_LOSS, "x": vs[k].tolist(), "y": _clean(vv[k])})

    bad = kept[~finite[kept]]
    if len(bad):
        traces.append({"role": "nonfinite", "name": "NaN / Inf", "x": steps[bad].tolist(), "y": [top] * len(bad),
                       "text": [f"{values[i]} at step {steps[i]}" for i in bad.tolist()]})

    mx: list[int] = []
    my: list[float] = []
    point: list[str] = []
    which: list[int] = []
    for i, inc in enumerate(analysis.incidents):
        if inc.metric != metric:
            continue
        points = [("peak", inc.peak, inc.peak_value)]
        if inc.onset != inc.peak:  # a one-step spike needs one marker, not two on top of each other
            points.insert(0, ("onset", inc.onset, _value_at(steps, values, inc.onset)))
        for label, step, value in points:
            mx.append(int(step))
            my.append(value if math.isfinite(value) else top)
            point.append(label)
            which.append(i)
    if mx:
        traces.append({"role": "incident", "name": "incidents", "x": mx, "y": _clean(np.asarray(my)),
                       "point": point, "incident": which})
    stream = M.stream_of(metric)
    title = _TITLES.get(metric, f"Training loss: {stream} stream" if stream else metric)
    return {"metric": metric, "title": title, "log": metric in (M.GRAD_NORM, M.LOSS_SCALE),
            "fit_after": fit_after,
            "traces": traces}


_TITLES = {M.LOSS: "Training loss", M.GRAD_NORM: "Gradient norm", M.LR: "Learning rate",
           M.LOSS_SCALE: "fp16 loss scale", M.VAL_LOSS: "Validation loss"}


def _simulated(simulation) -> list[dict[str, Any]]:
    """``lossguard simulate``'s decisions as guard rows named ``"simulated <action>"`` (none without one)."""
    if simulation is None:
        return []
    keep = ("to_step", "skip_batches", "factor", "until_step", "resume_from", "counterfactual")
    return [{"step": int(d["step"]), "event": f"simulated {d['event']}",
             "text": ", ".join(f"{k}={d[k]}" for k in keep if d.get(k) is not None)}
            for d in simulation.decisions]


def report_data(analysis: Analysis, *, title: str | None = None, simulation=None) -> dict[str, Any]:
    """The JSON document the report's script draws (also handy for tests and other front ends).

    Args:
        analysis: the analysed run.
        title: the page title; defaults to the first source file's name.

    Returns:
        ``{"title", "headline", "severity", "facts", "range", "kinds", "incidents", "segments",
        "guard", "charts", "suspects"}``; every list is JSON-ready. An incident's ``"suspects"`` are
        the samples the guard named on its withheld steps, in words; the top-level ``"suspects"``
        those of withheld steps outside every incident.
    """
    log = analysis.log
    firsts = [int(s.steps.min()) for s in log.series.values() if len(s)]
    lasts = [int(s.steps.max()) for s in log.series.values() if len(s)]
    first, last = (min(firsts), max(lasts)) if firsts else (0, 1)
    total = max(last - first, 1)
    main = log.series.get(M.LOSS) or next(iter(log.series.values()))
    interval = max(1, int(np.median(np.diff(main.steps[:10_000])))) if len(main) > 1 else 1  # logging period
    zooms = [_zoom(inc, first, last, interval) for inc in analysis.incidents]
    windows = [_window(z, inc.peak) for z, inc in zip(zooms, analysis.incidents, strict=True)]

    named, unmatched = by_incident(suspect_records(analysis.guard_actions), analysis.incidents)
    incidents = []
    for i, inc in enumerate(analysis.incidents):
        x0: float = inc.onset
        x1: float = inc.end if inc.end is not None else last
        if x1 - x0 < total * 0.004:  # make a one-step incident visible at full zoom
            mid, half = (x0 + x1) / 2, total * 0.002
            x0, x1 = mid - half, mid + half
        plans = [p for p in analysis.plans if p.incident == i]
        incidents.append({
            "index": i, "kind": inc.kind.value, "metric": inc.metric, "onset": int(inc.onset), "peak": int(inc.peak),
            "end": None if inc.end is None else int(inc.end), "severity": inc.severity,
            "summary": incident_summary(inc),
            "evidence": str(inc.evidence), "span": [float(x0), float(x1)],
            "zoom": [float(z) for z in zooms[i]],
            "plan": [describe_plan(p) for p in plans], "reasons": [r for p in plans for r in p.reasons],
            "suspects": [describe(r) for r in named.get(i, [])],
        })
    kinds = {k: {"label": KIND_STYLE[k][0], "colour": KIND_STYLE[k][1]}
             for k in dict.fromkeys(inc.kind for inc in analysis.incidents)}
    keep = sorted({s for inc in analysis.incidents for s in (inc.onset, inc.peak, inc.end) if s is not None})
    severities = [inc.severity for inc in analysis.incidents]
    return {
        "title": title or (Path(log.sources[0]).name if log.sources else "training run"),
        "headline": headline(analysis),
        # A log too short to judge is not "ok": its page is marked like an info finding.
        "severity": (worst.value if (worst := Severity.worst(severities)) is not None  # None: no incident
                     else "info" if not_judged(analysis) else "ok"),
        "facts": run_facts(analysis),
        "range": [first, last] if last > first else [first - 1, first + 1],  # a one-step run still has an axis
        "kinds": {k.value: v for k, v in kinds.items()},
        "incidents": incidents,
        "segments": [{"step": g.first_step, "kind": g.kind, "superseded": g.superseded, "source": g.source,
                      "note": g.note} for g in log.segments[1:]],
        "guard": [{"step": int(a["step"]), "event": str(a["event"]),
                   "text": ", ".join(f"{k}={v}" for k, v in a.items() if k not in ("step", "event"))}
                  for a in analysis.guard_actions if "step" in a and "event" in a] + _simulated(simulation),
        "charts": [_chart(analysis, m, keep, windows) for m in chart_metrics(analysis)],
        "suspects": [describe(r) for r in unmatched],
    }


def _asset(name: str) -> str:
    return resources.files("lossguard.report").joinpath("assets").joinpath(name).read_text(encoding="utf-8")


def plotly_bundle() -> str:
    """The plotly.js source embedded in reports: the vendored basic bundle, else the ``plotly`` wheel's."""
    try:
        return _asset(PLOTLY_ASSET)
    except FileNotFoundError:
        return require("plotly.offline", "report", "the HTML report").get_plotlyjs()


def render_html(analysis: Analysis, *, title: str | None = None, simulation=None) -> str:
    """The report as one HTML string (see :func:`write_html`)."""
    data = report_data(analysis, title=title, simulation=simulation)
    # "</" inside a <script> would end it early; JSON allows the escaped form "<\/".
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    plotly_js = plotly_bundle()
    values = {
        "TITLE": html.escape(data["title"]), "HEADLINE": html.escape(data["headline"]),
        "SEVERITY": data["severity"], "FACTS": html.escape(data["facts"]), "CSS": _asset("report.css"),
        "PLOTLY_JS": plotly_js, "APP_JS": _asset("report.js"), "DATA": payload,
    }
    # One pass over the template, so text inside an inserted value is never taken for a placeholder.
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], _asset("report.html"))


def write_html(analysis: Analysis, path: str | Path, *, title: str | None = None, simulation=None) -> Path:
    """Write the self-contained HTML report of ``analysis`` to ``path``.

    Args:
        analysis: the analysed run (``lossguard.analysis.analyze``).
        path: the file to write; its folder must exist.
        title: the page title; defaults to the first source file's name.
        simulation: a :class:`lossguard.simulate.Simulation` of the same run; its decisions are drawn
            in the guard-actions row as ``simulated skip``, ``simulated rollback``, ...

    Returns:
        The path written.

    Raises:
        LossguardError: the folder does not exist or cannot be written.
        MissingDependencyError: plotly is not installed (``pip install 'lossguard[report]'``).
    """
    path = Path(path)
    text = render_html(analysis, title=title, simulation=simulation)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise LossguardError(f"cannot write the HTML report: {exc.strerror}", path=path,
                             fix="choose a file in an existing, writable folder") from exc
    return path
