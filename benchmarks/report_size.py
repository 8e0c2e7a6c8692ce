"""HTML/PNG report of a 1,000,000-step run: write time, file size, open time, spikes kept.

Compares, in the same run:
  * lossguard's report (M4 downsampling, full resolution around incidents, plotly.js embedded);
  * plotly's own ``Figure.write_html`` with every point (the obvious alternative: no downsampling);
  * stride thinning to the same point budget as ours (the obvious cheap downsampling): spikes lost.
Open time is measured in headless Chromium (Debian's /usr/bin/chromium) when it is installed.

    .venv/bin/python benchmarks/report_size.py [--steps 1000000] [--no-browser]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from lossguard import metrics as M
from lossguard.analysis import Analysis
from lossguard.classify.incident import Incident, IncidentKind
from lossguard.plan import RecoveryPlan
from lossguard.report.downsample import downsample, isolated_spikes
from lossguard.report.html import BUCKETS, write_html
from lossguard.report.png import write_png
from lossguard.runlog import RunLogBuilder
from lossguard.stitch import stitch

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def make_run(n: int, seed: int = 0) -> tuple[Analysis, np.ndarray]:
    """A run of n steps (loss, grad norm, lr) with 3 spikes, a NaN and 200 one-step data outliers."""
    rng = np.random.default_rng(seed)
    steps = np.arange(n, dtype=np.int64)
    loss = 2.2 + 8.5 * np.exp(-steps / (n / 15)) + 0.04 * rng.standard_normal(n)
    grad = 0.3 + 0.05 * rng.standard_normal(n) ** 2
    lr = 3e-4 * np.minimum(1, (steps + 1) / 2000) * (0.1 + 0.45 * (1 + np.cos(np.pi * steps / n)))
    outliers = np.sort(rng.choice(np.arange(1000, n - 1000), size=200, replace=False))
    loss[outliers] += rng.uniform(0.15, 1.0, size=len(outliers))
    incidents, plans = [], []
    for j, (at, ratio, kind) in enumerate(((int(0.31 * n), 2.3, IncidentKind.SPIKE_SLOW),
                                           (int(0.55 * n), 1.6, IncidentKind.SPIKE_FAST),
                                           (int(0.8 * n), 3.5, IncidentKind.SPIKE_NO_RECOVERY))):
        base = float(np.median(loss[at - 200:at]))
        width = 400 if kind is IncidentKind.SPIKE_SLOW else 30
        bump = (ratio - 1) * base * np.exp(-np.arange(width) / (width / 5))
        loss[at:at + width] += bump
        grad[at:at + 10] *= 10
        end = None if kind is IncidentKind.SPIKE_NO_RECOVERY else at + width
        if end is None:
            loss[at + 1:] += 0.3 * base
        incidents.append(Incident(kind=kind, metric=M.LOSS, onset=at, peak=at, end=end, baseline=base,
                                  peak_value=float(loss[at]), magnitude=float(loss[at]) - base, magnitude_sigma=30.0,
                                  severity="critical" if end is None else "warning", evidence="synthetic"))
        plans.append(RecoveryPlan(incident=j, action="rollback", rollback_to_step=at - 100,
                                  skip_batches=(at - 100, at + 300)))
    nan_at = int(0.9 * n)
    grad[nan_at] = np.nan
    incidents.append(Incident(kind=IncidentKind.NON_FINITE, metric=M.GRAD_NORM, onset=nan_at, peak=nan_at,
                              end=nan_at + 1, baseline=0.3, peak_value=float("nan"), magnitude=float("nan"),
                              magnitude_sigma=float("nan"), severity="critical"))
    b = RunLogBuilder("csv")
    b.start_segment("bench.csv")
    for name, v in ((M.LOSS, loss), (M.GRAD_NORM, grad), (M.LR, lr)):
        b.add(name, steps, v)
    return Analysis(log=stitch(b.build()), incidents=incidents, plans=plans), outliers


def plotly_full(analysis: Analysis, path: Path) -> None:
    """The alternative: plotly's own writer with every point of every metric."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    names = [M.LOSS, M.GRAD_NORM, M.LR]
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True)
    for i, name in enumerate(names, 1):
        s, v = analysis.log.live(name)
        fig.add_trace(go.Scatter(x=s, y=v, mode="lines", name=name), row=i, col=1)
    fig.write_html(path, include_plotlyjs=True, full_html=True)


def open_time(path: Path, ready_js: str, timeout_s: float = 120) -> float | None:
    """Seconds from navigation until ``ready_js`` is true in headless Chromium (None: timed out)."""
    from playwright.sync_api import TimeoutError as PWTimeout
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        t0 = time.perf_counter()
        try:
            page.goto(path.resolve().as_uri(), timeout=timeout_s * 1000)
            page.wait_for_function(ready_js, timeout=timeout_s * 1000)
            return time.perf_counter() - t0
        except PWTimeout:
            return None
        finally:
            browser.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--no-browser", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    analysis, outliers = make_run(args.steps)
    print(f"run: {args.steps} steps x 3 metrics, 4 incidents, 200 one-step outliers "
          f"(built in {time.perf_counter() - t0:.1f} s); cores: {os.cpu_count()}")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rows = []
        t = time.perf_counter(); ours = write_html(analysis, tmp / "ours.html"); t_ours = time.perf_counter() - t
        t = time.perf_counter(); png = write_png(analysis, tmp / "ours.png"); t_png = time.perf_counter() - t
        t = time.perf_counter(); plotly_full(analysis, tmp / "full.html"); t_full = time.perf_counter() - t
        size_ours, size_full = ours.stat().st_size / 1e6, (tmp / "full.html").stat().st_size / 1e6
        rows.append(("lossguard write_html", t_ours, size_ours))
        rows.append(("plotly write_html, all points", t_full, size_full))
        rows.append(("lossguard write_png", t_png, png.stat().st_size / 1e6))

        # Spikes kept: our downsampling vs stride thinning to the same number of points.
        steps, values = analysis.log.live(M.LOSS)
        kept = downsample(steps, values, buckets=BUCKETS)
        stride = np.arange(0, len(steps), max(1, len(steps) // len(kept)))
        lost_ours = np.setdiff1d(outliers, kept).size
        lost_stride = np.setdiff1d(outliers, stride).size
        # Outliers that stick out of both neighbours by > 6 noise sigmas are kept by construction;
        # smaller ones only when they are their bucket's extreme (then they are within the noise
        # band at any zoom where their bucket-mate is visible).
        big = np.intersect1d(outliers, isolated_spikes(values, z=6.0))
        lost_big = np.setdiff1d(big, kept).size

        print(f"\n{'':34s} {'write s':>8s} {'size MB':>8s}")
        for name, secs, mb in rows:
            print(f"{name:34s} {secs:8.2f} {mb:8.2f}")
        print(f"ratio size  plotly-all / lossguard: {size_full / size_ours:.1f}x")
        print(f"ratio write plotly-all / lossguard: {t_full / t_ours:.1f}x")
        print(f"one-step outliers lost (of 200): lossguard {lost_ours} (of the {len(big)} above 6 sigma: "
              f"{lost_big}), stride thinning to {len(stride)} points {lost_stride}")
        print(f"loss points kept by downsample() before incident windows: {len(kept)} of {len(steps)}")

        if not args.no_browser and os.path.exists(CHROMIUM):
            # The same report with plotly's full 4.8 MB bundle instead of the vendored basic one.
            from plotly.offline import get_plotlyjs

            from lossguard.report.html import plotly_bundle

            fat = tmp / "ours_full_bundle.html"
            fat.write_text(ours.read_text(encoding="utf-8").replace(plotly_bundle(), get_plotlyjs()), encoding="utf-8")
            print(f"lossguard report with plotly's full bundle: {fat.stat().st_size / 1e6:.2f} MB")
            o = open_time(ours, "document.body.dataset.ready === '1'")
            ofat = open_time(fat, "document.body.dataset.ready === '1'")
            f = open_time(tmp / "full.html", "(() => { const g = document.querySelector('.js-plotly-plot');"
                          " return g && g._fullLayout && g.querySelectorAll('.scatterlayer .trace').length === 3; })()")
            show = lambda v: "timeout" if v is None else f"{v:.2f} s"  # noqa: E731
            print(f"open in headless chromium: lossguard {show(o)}, lossguard with full bundle {show(ofat)}"
                  + (f" (ratio {ofat / o:.1f}x)" if o and ofat else "")
                  + f", plotly-all {show(f)}" + (f" (ratio {f / o:.1f}x)" if o and f else ""))


if __name__ == "__main__":
    main()
