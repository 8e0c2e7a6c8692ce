"""The static PNG report: a real PNG of the right size, with the curves, spans and markers drawn."""
from __future__ import annotations

import numpy as np
import pytest

from test_report_html import make_analysis

pytest.importorskip("matplotlib")

from lossguard.errors import LossguardError  # noqa: E402
from lossguard.report.png import write_png  # noqa: E402


def _rgb(path):
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB"), dtype=np.int16)


def _has_colour(img, hex_colour, alpha=1.0, tol=6):
    """True when some pixel has ``hex_colour`` drawn at ``alpha`` over white."""
    c = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)])
    want = np.round(alpha * c + (1 - alpha) * 255)
    return bool(np.any(np.all(np.abs(img - want) <= tol, axis=-1)))


@pytest.fixture(scope="module")
def picture(tmp_path_factory):
    a = make_analysis(20_000)
    path = write_png(a, tmp_path_factory.mktemp("p") / "report.png", title="toy run")
    return path, _rgb(path)


def test_is_a_png_of_the_requested_width(picture):
    path, img = picture
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert img.shape[1] == 1400 and 900 < img.shape[0] < 1400


def test_curves_spans_and_markers_are_drawn(picture):
    _, img = picture
    assert img.std() > 20  # not blank
    assert _has_colour(img, "#1f4e79")            # the live curve
    assert _has_colour(img, "#ef6c00", 0.16, 3)   # the slow spike's shaded span
    assert _has_colour(img, "#6a1b9a")            # the NaN marker / NaN incident
    assert _has_colour(img, "#c62828")            # the rollback line and the critical headline


def test_no_incident_run_has_no_incident_colours(tmp_path):
    a = make_analysis(3000)
    a.incidents, a.plans, a.guard_actions = [], [], []
    img = _rgb(write_png(a, tmp_path / "calm.png"))
    assert _has_colour(img, "#1f4e79")
    assert not _has_colour(img, "#ef6c00", 0.16, 2)


def test_unwritable_path_is_a_clear_error(tmp_path):
    with pytest.raises(LossguardError, match="cannot write the PNG report"):
        write_png(make_analysis(2000), tmp_path / "missing" / "r.png")
