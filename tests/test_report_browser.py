"""The HTML report as a person sees it: the real file in a real headless Chromium (Debian's package).

Playwright drives ``/usr/bin/chromium``; it never downloads a browser. Every network request is
blocked and recorded, so "self-contained" is checked by behaviour, not only by reading the file.
Without chromium these tests skip locally and fail in CI (``CI=true``).
"""
from __future__ import annotations

import io
import os
import shutil

import numpy as np
import pytest

from test_report_html import make_analysis

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser():
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing in CI; .ci/run must install Debian's chromium")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    try:
        from playwright import sync_api
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("playwright is missing in CI; it is in the 'test' extra")
        pytest.skip("playwright is not installed (pip install 'lossguard[test]')")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium"),
                               args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def analysis():
    return make_analysis(20_000)


@pytest.fixture(scope="module")
def loaded(browser, analysis, tmp_path_factory):
    """The report open in a page, with every console message and network request recorded."""
    from lossguard.report.html import write_html

    path = write_html(analysis, tmp_path_factory.mktemp("b") / "report.html", title="toy run")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    console, requests = [], []
    page.on("console", lambda m: console.append((m.type, m.text)))
    page.on("pageerror", lambda e: console.append(("pageerror", str(e))))

    def block(route):
        if not route.request.url.startswith("file://"):
            requests.append(route.request.url)
            return route.abort()
        return route.continue_()

    page.route("**/*", block)
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    yield page, console, requests
    page.close()


def _ranges(page):
    return page.evaluate("window.lossguardReport.charts.map(c => c.gd.layout.xaxis.range.slice())")


def test_loads_with_no_console_errors_and_no_network(loaded):
    page, console, requests = loaded
    assert [m for m in console if m[0] in ("error", "pageerror")] == []
    assert requests == []


def test_charts_are_drawn_not_blank(loaded):
    from PIL import Image

    page, _, _ = loaded
    cards = page.query_selector_all(".chart")
    assert len(cards) == 5  # loss, guard actions, grad norm, lr, loss scale
    for card in cards:
        img = np.asarray(Image.open(io.BytesIO(card.screenshot())).convert("L"), dtype=np.float64)
        dark = (img < 128).mean()
        assert img.std() > 10, f"{card.get_attribute('id')} looks blank (pixel std {img.std():.1f})"
        assert dark > 0.002, f"{card.get_attribute('id')} has almost no dark pixels ({dark:.4f})"


def test_expected_traces_and_incident_markers_are_in_the_dom(loaded):
    page, _, _ = loaded
    per_chart = page.evaluate("""() => Array.from(document.querySelectorAll('.chart')).map(gd => ({
        metric: gd.dataset.metric,
        traces: gd.querySelectorAll('.scatterlayer .trace').length,
        points: Array.from(gd.querySelectorAll('.scatterlayer .trace')).map(t => t.querySelectorAll('path.point').length),
        roles: gd.data.map(t => t.meta),
        spans: gd.querySelectorAll('.layer-below .shapelayer path').length,
        lines: gd.querySelectorAll('.layer-above .shapelayer path').length }))""")
    by = {c["metric"]: c for c in per_chart}
    assert by["loss"]["roles"] == ["live", "dead", "incident"] and by["loss"]["traces"] == 3
    assert by["loss"]["points"][2] == 2  # onset + peak of the spike
    assert by["grad_norm"]["roles"] == ["live", "dead", "nonfinite", "incident"]
    assert by["grad_norm"]["points"][2:] == [1, 1]  # the NaN marker; the one-step NaN incident's peak
    assert by["guard"]["roles"] == ["guard", "guard"] and by["guard"]["points"] == [1, 1]
    for metric in ("lr", "loss_scale"):  # the rollback superseded points of every metric
        assert by[metric]["roles"] == ["live", "dead"] and by[metric]["traces"] == 2
    for c in per_chart:
        assert c["spans"] == 2, c  # one shaded span per incident, on every chart
        assert c["lines"] == 2, c  # the rollback and the resume
    items = page.query_selector_all("li.incident")
    assert len(items) == 2
    assert "Roll back to step 2900" in items[0].inner_text()


def test_clicking_an_incident_zooms_every_chart_to_it(loaded, analysis):
    page, _, _ = loaded
    inc = analysis.incidents[0]
    page.click("li.incident[data-index='0']")
    page.wait_for_function("document.body.dataset.xrange && document.body.dataset.xrange !== 'all'")
    ranges = _ranges(page)
    for lo, hi in ranges:
        assert lo < inc.onset and hi > inc.end, (lo, hi)
        assert hi - lo < 20_000 / 5  # zoomed, not the whole run
    assert len({tuple(r) for r in ranges}) == 1  # all charts show the same steps
    # The loss chart's y axis fits what is visible: the peak is on screen, the pre-spike level too.
    y0, y1 = page.evaluate("window.lossguardReport.charts[0].gd.layout.yaxis.range")
    assert y0 < inc.baseline and inc.peak_value <= y1 < 2 * inc.peak_value
    assert "selected" in page.get_attribute("li.incident[data-index='0']", "class")
    page.click("#show-all")
    page.wait_for_function("document.body.dataset.xrange === 'all'")
    assert _ranges(page)[0] == [0, 19_999]


def test_drag_zoom_on_one_chart_zooms_all_and_double_click_resets(loaded):
    page, _, _ = loaded
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_function("document.body.dataset.xrange === 'all'")
    box = page.query_selector("#chart-0 .nsewdrag").bounding_box()
    y = box["y"] + box["height"] * 0.5
    page.mouse.move(box["x"] + box["width"] * 0.4, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.6, y + 2, steps=8)  # a horizontal drag: x-only zoom
    page.mouse.up()
    page.wait_for_function("document.body.dataset.xrange !== 'all'")
    ranges = _ranges(page)
    lo, hi = ranges[0]
    assert 7_000 < lo < 9_000 and 11_000 < hi < 13_000, (lo, hi)
    assert all(r == ranges[0] for r in ranges), ranges  # every chart follows, guard strip included
    page.mouse.dblclick(box["x"] + box["width"] * 0.5, y)
    page.wait_for_function("document.body.dataset.xrange === 'all'")
    assert all(r == [0, 19_999] for r in _ranges(page))


def test_hover_shows_step_and_value_and_log_toggle_works(loaded):
    page, _, _ = loaded
    page.evaluate("window.scrollTo(0, 0)")
    box = page.query_selector("#chart-0 .nsewdrag").bounding_box()
    page.mouse.move(box["x"] + 5, box["y"] + 5)
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5, steps=5)
    # Hover labels follow the mouse with a throttle: wait for the label of the final position (the
    # middle of a 0..19999 axis), not one drawn on the way there.
    title = "document.querySelector('#chart-0 .hoverlayer .legendtitletext')"
    page.wait_for_function(f"{title} && Math.abs(Number({title}.textContent) - 10000) < 2000", timeout=20_000)
    step = int(page.text_content("#chart-0 .hoverlayer .legendtitletext"))
    assert 8_000 < step < 12_000
    value = page.text_content("#chart-0 .hoverlayer .legendtext")
    assert value.startswith("loss : ") and 2.0 < float(value.split(":")[1]) < 3.0
    page.check("#charts .logtoggle[data-metric='loss']")
    page.wait_for_function("window.lossguardReport.charts[0].gd.layout.yaxis.type === 'log'")
    page.uncheck("#charts .logtoggle[data-metric='loss']")
    page.wait_for_function("window.lossguardReport.charts[0].gd.layout.yaxis.type === 'linear'")


def test_a_million_step_report_opens(browser, tmp_path):
    import time

    from lossguard.report.html import write_html

    path = write_html(make_analysis(1_000_000), tmp_path / "big.html")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    t0 = time.perf_counter()
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    elapsed = time.perf_counter() - t0
    assert errors == []
    assert elapsed < 30, f"took {elapsed:.1f} s to open"  # generous: 2 shared cores; see RESULTS.md
    page.close()


def test_a_real_run_read_and_analysed_end_to_end(browser, real_logs, tmp_path):
    """megatron_mixtral8x7b_v0p8_a100.csv (NVIDIA's CI golden values): every incident the analyser
    found on the loss has its peak marker in the DOM, and the list has one entry per incident."""
    from lossguard.analysis import analyze
    from lossguard.io import read_log
    from lossguard.report.html import write_html

    analysis = analyze(read_log(real_logs / "megatron_mixtral8x7b_v0p8_a100.csv"))
    assert analysis.incidents, "the Mixtral run has known spikes (see real-logs/README.md)"
    path = write_html(analysis, tmp_path / "mixtral.html")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    assert errors == []
    assert len(page.query_selector_all("li.incident")) == len(analysis.incidents)
    peaks = page.evaluate("""() => { const gd = document.querySelector('.chart[data-metric="loss"]');
        const i = gd.data.findIndex(t => t.meta === 'incident');
        return gd.querySelectorAll('.scatterlayer .trace')[i].querySelectorAll('path.point').length; }""")
    on_loss = [inc for inc in analysis.incidents if inc.metric == "loss"]
    assert peaks == len(on_loss) + sum(inc.onset != inc.peak for inc in on_loss)
    page.close()
