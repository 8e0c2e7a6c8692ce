"""Terminal summary of an analysis: the run in one line, the loss curve as a small plot, every
incident with its evidence, and the recovery plan.

Plain text always works (CI logs, pipes, ``NO_COLOR``); when ``rich`` is installed and the output
is a terminal, severities are coloured. The plot draws, per column, the range (min..max) of the live
loss in that bucket of steps, so a one-point spike in a million steps is still visible, and marks
each incident's onset under the curve with its number.

What a person reads first is whether the run is healthy (:func:`.words.health`): the incidents that
need action come first, each with its plan; one-step outliers (single bad batches) are one line;
the full list stays in ``--json`` and the HTML report.
"""
from __future__ import annotations

import math
import os
import sys
from typing import IO

import numpy as np

from ..analysis import Analysis
from ..classify.incident import Incident, IncidentKind as K
from ..plan import RecoveryPlan
from ..recovery.severity import Severity
from ..recovery.suspects import by_incident, describe, suspect_records
from .words import ONE_STEP_LISTED, ONE_STEP_POINTS, health, magnitude, skip_phrase, word

_SEVERITY_COLOR = {Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def _fmt(v: float | None, digits: int = 4) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    return f"{v:.{digits}g}"


def plot(steps: np.ndarray, values: np.ndarray, incidents: list[Incident], *, width: int = 72,
         height: int = 10, ascii_only: bool = False, dots: list[int] | None = None) -> list[str]:
    """The curve as text lines: y axis labels, one column per bucket of steps, incident markers below
    (the incident's number; ``o`` at each step of ``dots``, the grouped one-step outliers)."""
    ok = np.isfinite(values)
    steps, values = steps[ok], values[ok]
    if len(values) < 2:
        return ["(not enough finite points to plot)"]
    width = max(10, width - 10)
    lo_s, hi_s = int(steps[0]), int(steps[-1])
    col = np.minimum(((steps - lo_s) * width) // max(hi_s - lo_s + 1, 1), width - 1).astype(np.int64)
    vmin = np.full(width, np.inf)
    vmax = np.full(width, -np.inf)
    np.minimum.at(vmin, col, values)
    np.maximum.at(vmax, col, values)
    # The first steps of a run sit far above the rest; scale to what follows them (marked ^ above).
    settled = values[len(values) // 50:] if len(values) >= 100 else values
    y_lo = float(np.min(values))
    y_hi = float(np.max(settled))
    if y_hi <= y_lo:
        y_hi = y_lo + 1.0
    full, part = ("#", ":") if ascii_only else ("\u2588", "\u2502")
    rows = [[" "] * width for _ in range(height)]
    for c in range(width):
        if not np.isfinite(vmin[c]):
            continue
        r0 = int((min(vmin[c], y_hi) - y_lo) / (y_hi - y_lo) * (height - 1) + 0.5)
        r1 = int((min(vmax[c], y_hi) - y_lo) / (y_hi - y_lo) * (height - 1) + 0.5)
        for r in range(r0, r1 + 1):
            rows[height - 1 - r][c] = full if r == r0 else part
        if vmax[c] > y_hi:
            rows[0][c] = "^"
    lines = []
    for i, row in enumerate(rows):
        label = _fmt(y_hi if i == 0 else (y_lo if i == height - 1 else None), 4)
        lines.append(f"{label if i in (0, height - 1) else '':>8} |" + "".join(row))
    marks = [" "] * width
    for n, inc in enumerate(incidents, 1):
        c = min(max(((inc.onset - lo_s) * width) // max(hi_s - lo_s + 1, 1), 0), width - 1)
        tag = str(n)
        for j, ch in enumerate(tag):
            if c + j < width and marks[c + j] == " ":
                marks[c + j] = ch
    for step in dots or []:
        c = min(max(((step - lo_s) * width) // max(hi_s - lo_s + 1, 1), 0), width - 1)
        if marks[c] == " ":
            marks[c] = "o"
    lines.append(" " * 9 + "+" + "-" * width)
    if incidents or dots:
        lines.append(" " * 10 + "".join(marks))
    lines.append(" " * 10 + f"step {lo_s}" + " " * max(1, width - len(f"step {lo_s}") - len(str(hi_s))) + str(hi_s))
    return lines


def _incident_line(n: int | str, inc: Incident) -> list[str]:
    rel = ""
    if math.isfinite(inc.baseline) and inc.baseline and math.isfinite(inc.peak_value):
        rel = f" ({inc.peak_value / inc.baseline:.2f}x"
        rel += f", {inc.magnitude_sigma:+.1f} sigma)" if math.isfinite(inc.magnitude_sigma) else ")"
    streams = f" streams: {', '.join(inc.streams)}" if inc.streams and inc.kind is K.STREAM_SPIKE else ""
    return [f"  [{n}] {Severity(inc.severity).value.upper():8} {inc.kind.value:20} {inc.metric}: onset {inc.onset}, "
            f"peak {inc.peak}, end {inc.end if inc.end is not None else '-'}; "
            f"{_fmt(inc.baseline)} -> {_fmt(inc.peak_value)}{rel}{streams}",
            f"      {inc.evidence}"]


def _plan_lines(p: RecoveryPlan) -> list[str]:
    what = [word(p.action)]
    if p.rollback_to_step is not None:
        what.append(f"to step {p.rollback_to_step}" + (" (checkpoint exists)" if p.checkpoint_exists else ""))
    if p.skip_batches:
        what.append(f"skip {skip_phrase(p.skip_batches)}")
    if p.lr_factor != 1.0:
        what.append(f"LR x{p.lr_factor:g}")
    if p.reset_loss_scale:
        what.append("reset the loss scale")
    return ["      plan: " + ", ".join(what)] + [f"        - {r}" for r in p.reasons]


def _outlier_line(analysis: Analysis, members: list[int]) -> str:
    incs = [analysis.incidents[i] for i in members]
    top = max(incs, key=lambda i: i.peak_value / i.baseline if i.baseline else 0.0)
    steps = ", ".join(str(i.peak) for i in incs[:ONE_STEP_LISTED])
    more = f" and {len(incs) - ONE_STEP_LISTED} more" if len(incs) > ONE_STEP_LISTED else ""
    return (f"  {len(incs)} one-step outlier(s), each back on its trend within {ONE_STEP_POINTS} logged points "
            f"(largest {magnitude(top)} at step {top.peak}), at steps {steps}{more}: single bad batches, "
            "nothing to do (details: --json or the HTML report).")


def suspect_section(analysis: Analysis, number: dict[int, int]) -> list[str]:
    """The samples the guard named on withheld steps, each under its incident's number (the one-step
    outliers, grouped above, by their step)."""
    records = suspect_records(analysis.guard_actions)
    if not records:
        return []
    named, _ = by_incident(records, analysis.incidents)
    where = {id(r): f"[{number[i]}] " if i in number else "" for i, rs in named.items() for r in rs}
    return ["", f"Samples the guard named ({len(records)} withheld step(s); share of the step's excess):"] + [
        f"  {where.get(id(r), '')}{describe(r)}" for r in records]


def render_text(analysis: Analysis, *, width: int = 80, ascii_only: bool = False) -> str:
    """The whole terminal summary as one string (no colour codes).

    Health first (:func:`.words.health`), then the incidents that need action, each with its plan, then
    the one-step outliers in one line, then the other findings; the plot marks itemised incidents by
    number and grouped outliers with ``o``.
    """
    log = analysis.log
    s = log.summary()
    h = health(analysis)
    out = []
    steps, values = log.live(analysis.metric)
    out.append(f"lossguard analyze  {', '.join(log.sources) or '(in memory)'}")
    out.append(f"  format {log.format}; {analysis.metric}: {len(steps)} live points, steps {s['first_step']}-"
               f"{s['last_step']}, every {analysis.log_interval} step(s); {len(log.segments)} segment(s): "
               f"{s['resumes']} resume(s), {s['rollbacks']} rollback(s), {s['dead_points']} superseded point(s)")
    out.append("")
    itemised = h.act + h.other
    marked = [analysis.incidents[i] for i in itemised]
    lines = plot(steps, values, marked, width=width, ascii_only=ascii_only,
                 dots=[analysis.incidents[i].onset for i in h.outliers])
    out.extend(lines)
    out.append("")
    out.append(h.headline)
    plans = {p.incident: p for p in analysis.plans}
    number = {i: n for n, i in enumerate(itemised, 1)}
    if h.act:
        out.append("")
        out.append(f"Needs action ({len(h.act)}):")
        for i in h.act:
            out.extend(_incident_line(number[i], analysis.incidents[i]))
            if i in plans:
                out.extend(_plan_lines(plans[i]))
    if h.outliers:
        out.append("")
        out.append(_outlier_line(analysis, h.outliers))
    if h.other:
        out.append("")
        out.append(f"No action needed ({len(h.other)}):")
        for i in h.other:
            out.extend(_incident_line(number[i], analysis.incidents[i]))
            reasons = plans[i].reasons if i in plans else []
            if reasons:
                out.append(f"      plan: {reasons[0]}")
    out.extend(suspect_section(analysis, number))
    for note in analysis.notes:
        out.append(f"note: {note}")
    if analysis.guard_actions:
        out.append(f"The guard recorded {len(analysis.guard_actions)} action(s) in this log.")
    return "\n".join(out)


def print_text(analysis: Analysis, file: IO[str] | None = None, *, width: int | None = None) -> None:
    """Print the summary; coloured with rich when it is installed and ``file`` is a terminal."""
    file = file or sys.stdout
    if hasattr(file, "isatty"):
        width = width or min(os.get_terminal_size().columns if file.isatty() else 100, 120)
    else:  # as before the line was split: a file without isatty() always gets 100
        width = 100
    text = render_text(analysis, width=width)
    use_rich = file.isatty() and not os.environ.get("NO_COLOR")
    if use_rich:
        try:
            from rich.console import Console
            from rich.text import Text
        except ImportError:
            use_rich = False
    if not use_rich:
        print(text, file=file)
        return
    console = Console(file=file, highlight=False, soft_wrap=True)
    for line in text.splitlines():
        t = Text(line)
        for sev, style in _SEVERITY_COLOR.items():
            tag = sev.value.upper()
            at = line.find(tag)
            if at >= 0 and line.lstrip().startswith("["):
                t.stylize(style, at, at + len(tag))
        console.print(t)
