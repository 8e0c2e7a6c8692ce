"""A static picture of the report for CI logs, chat and papers.

Drawn with matplotlib's Agg canvas (no display, no pyplot global state) from the same document the
HTML report draws (:func:`lossguard.report.html.report_data`), so both show the same points, colours
and words. Why matplotlib and not a screenshot of the HTML in headless Chromium: it is a pip
dependency that works on any CI runner or laptop without a browser, it is deterministic, and it
writes a 1,000,000-step picture in about a second.
"""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis import Analysis
from ..errors import LossguardError, require
from ..recovery.severity import Severity
from .html import report_data

LINE, VAL, NAN = "#1f4e79", "#2e7d32", "#6a1b9a"
SEVERITY_COLOUR = {Severity.CRITICAL: "#c62828", Severity.WARNING: "#ef6c00", Severity.INFO: "#607d8b", "ok": "#2e7d32"}
GUARD_COLOUR = {"skip": "#ef6c00", "rollback": "#c62828", "lr_cut": "#1565c0", "loss_scale_reset": "#4527a0",
                "halt": "#000000"}
MAX_LISTED = 4
"""Incidents listed in words under the headline; the rest are counted."""


def _xy(trace: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    x = np.array([np.nan if v is None else v for v in trace["x"]], dtype=np.float64)
    y = np.array([np.nan if v is None else v for v in trace["y"]], dtype=np.float64)
    return x, y


def _draw_chart(ax, spec: dict[str, Any], data: dict[str, Any], first: bool) -> None:
    kinds = data["kinds"]
    for inc in data["incidents"]:
        alpha = {Severity.CRITICAL: 0.22, Severity.WARNING: 0.16}.get(inc["severity"], 0.09)  # as in the HTML
        ax.axvspan(*inc["span"], color=kinds[inc["kind"]]["colour"], alpha=alpha, lw=0, zorder=0)
    for seg in data["segments"]:
        rb = seg["kind"] == "rollback"
        ax.axvline(seg["step"], color="#c62828" if rb else "#555555", lw=1.1, ls="--", zorder=1)
        if first:
            ax.annotate(f"rollback to {seg['step']}" if rb else f"resume at {seg['step']}", (seg["step"], 1),
                        xycoords=("data", "axes fraction"), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=8, color="#c62828" if rb else "#555555")
    for t in spec["traces"]:
        x, y = _xy(t)
        role = t["role"]
        if role == "live":
            ax.plot(x, y, color=LINE, lw=0.9, zorder=3)
        elif role == "dead":
            ax.plot(x, y, color=LINE, lw=0.8, alpha=0.28, zorder=2)
        elif role == "val":
            ax.plot(x, y, color=VAL, lw=1.0, marker="o", ms=2.5, zorder=3)
        elif role == "nonfinite":
            ax.scatter(x, y, marker="x", s=40, color=NAN, zorder=5, clip_on=False)
        elif role == "incident":
            colours = [kinds[data["incidents"][i]["kind"]]["colour"] for i in t["incident"]]
            for xi, yi, c, p in zip(x, y, colours, t["point"], strict=False):
                if p == "peak":
                    ax.scatter([xi], [yi], marker="D", s=36, color=c, zorder=6, clip_on=False)
                else:
                    ax.scatter([xi], [yi], marker="o", s=60, facecolors="none", edgecolors=c, lw=1.5, zorder=6)
    if spec["log"]:
        ys = np.concatenate([_xy(t)[1] for t in spec["traces"] if t["role"] in ("live", "dead", "val")])
        if np.any(ys[np.isfinite(ys)] > 0):
            from matplotlib.ticker import FuncFormatter

            ax.set_yscale("log", base=2 if spec["metric"] == "loss_scale" else 10)
            plain = FuncFormatter(lambda v, _: f"{v:.0f}" if v >= 1000 else f"{v:.4g}")  # "0.5", "65536"
            ax.yaxis.set_major_formatter(plain)
            if spec["metric"] != "loss_scale":
                minor = FuncFormatter(lambda v, _: f"{v:.4g}" if str(f"{v:.1e}")[0] in "25" else "")
                ax.yaxis.set_minor_formatter(minor)
    if spec.get("fit_after") is not None:  # same y fit as the HTML: leave out the warm-up plunge
        fitted = [t for t in spec["traces"] if t["role"] in ("live", "dead", "val", "incident")]
        xys = [_xy(t) for t in fitted]
        y = np.concatenate([yy[(xx >= spec["fit_after"]) | (t["role"] == "incident")]
                            for (xx, yy), t in zip(xys, fitted, strict=True)])
        y = y[np.isfinite(y)]
        if len(y) and ax.get_yscale() == "linear":
            pad = (y.max() - y.min()) * 0.06 or abs(y.max()) * 0.05 or 0.5
            ax.set_ylim(y.min() - pad, y.max() + pad)
    ax.set_ylabel(spec["title"], fontsize=9)
    ax.grid(True, color="#eef0f2", lw=0.8)
    ax.tick_params(labelsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _draw_guard(ax, data: dict[str, Any]) -> None:
    rows = list(dict.fromkeys(g["event"] for g in data["guard"]))
    for r, name in enumerate(reversed(rows)):
        xs = [g["step"] for g in data["guard"] if g["event"] == name]
        ax.scatter(xs, [r] * len(xs), marker="D", s=28, color=GUARD_COLOUR.get(name, "#555555"), zorder=3)
    ax.set_yticks(range(len(rows)), list(reversed(rows)), fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_ylabel("guard", fontsize=9)
    ax.grid(True, axis="x", color="#eef0f2", lw=0.8)
    ax.tick_params(labelsize=8)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for seg in data["segments"]:
        ax.axvline(seg["step"], color="#c62828" if seg["kind"] == "rollback" else "#555555", lw=1.1, ls="--")


def write_png(analysis: Analysis, path: str | Path, *, title: str | None = None, width: float = 14.0,
              dpi: int = 100) -> Path:
    """Write a static PNG of the report: headline, incidents and plans in words, one panel per metric.

    Args:
        analysis: the analysed run.
        path: the PNG file to write; its folder must exist.
        title: shown above the headline; defaults to the first source file's name.
        width: figure width in inches (``width * dpi`` pixels).
        dpi: resolution.

    Returns:
        The path written.

    Raises:
        LossguardError: the file cannot be written.
        MissingDependencyError: matplotlib is not installed (``pip install 'lossguard[report]'``).
    """
    require("matplotlib", "report", "the PNG report")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    data = report_data(analysis, title=title)
    charts = data["charts"]
    heights = [(3.0 if len(charts) > 1 else 4.0) if i == 0 else 1.7 for i in range(len(charts))]
    if data["guard"]:
        heights.insert(1, 0.45 + 0.25 * len({g["event"] for g in data["guard"]}))
    lines = []
    worst_first = sorted(data["incidents"], key=lambda d: (-Severity(d["severity"]).rank, d["onset"]))
    for inc in worst_first[:MAX_LISTED]:
        plan = f" \u2014 {inc['plan'][0]}" if inc["plan"] else ""
        lines += textwrap.wrap(f"\u2022 {inc['summary']} [{inc['severity']}]{plan}", width=int(width * 14),
                               subsequent_indent="   ")
    if len(data["incidents"]) > MAX_LISTED:
        lines.append(f"\u2022 and {len(data['incidents']) - MAX_LISTED} more (see the HTML or JSON report)")
    head = 0.95 + 0.19 * len(lines)  # inches for title, headline, facts and the incident lines
    fig = Figure(figsize=(width, head + sum(heights) + 0.5), dpi=dpi)
    FigureCanvasAgg(fig)
    total = head + sum(heights) + 0.5
    fig.text(0.01, 1 - 0.18 / total, data["title"], fontsize=9, color="#5f6b76", va="top")
    fig.text(0.01, 1 - 0.38 / total, data["headline"], fontsize=14, weight="bold", va="top",
             color=SEVERITY_COLOUR[data["severity"]] if data["severity"] == Severity.CRITICAL else "#1d2329")
    fig.text(0.01, 1 - 0.68 / total, data["facts"], fontsize=9, color="#47525c", va="top")
    for k, line in enumerate(lines):
        fig.text(0.01, 1 - (0.92 + 0.19 * k) / total, line, fontsize=9, va="top")
    grid = fig.add_gridspec(len(heights), 1, height_ratios=heights, hspace=0.18,
                            top=1 - (head + 0.12) / total, bottom=0.4 / total, left=0.07, right=0.99)
    axes = [fig.add_subplot(grid[i, 0]) for i in range(len(heights))]
    for ax in axes[1:]:
        ax.sharex(axes[0])
    k = 0
    for i, ax in enumerate(axes):
        if data["guard"] and i == 1:
            _draw_guard(ax, data)
            continue
        _draw_chart(ax, charts[k], data, first=k == 0)
        k += 1
    lo, hi = data["range"]
    axes[0].set_xlim(lo - 1, hi + 1) if hi <= lo else axes[0].set_xlim(lo, hi)
    axes[-1].set_xlabel("step", fontsize=9)
    handles = [Patch(color=v["colour"], alpha=0.6, label=v["label"]) for v in data["kinds"].values()]
    if handles:
        axes[0].legend(handles=handles, loc="upper right", fontsize=8, frameon=False)
    path = Path(path)
    try:
        fig.savefig(path, format="png")
    except OSError as exc:
        raise LossguardError(f"cannot write the PNG report: {exc.strerror}", path=path,
                             fix="choose a file in an existing, writable folder") from exc
    return path
