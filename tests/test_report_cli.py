"""``lossguard report``: reads a real CSV log, writes the HTML and the PNG, and fails clearly on bad use."""
from __future__ import annotations

import csv
import json
import re

import numpy as np
import pytest

from lossguard import analysis as analysis_module
from lossguard.analysis import Analysis
from lossguard.cli import main


@pytest.fixture
def log_csv(tmp_path):
    """A 5,000-step run with a 3x loss spike at step 2500, written by Python's csv writer."""
    rng = np.random.default_rng(0)
    path = tmp_path / "train.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "loss", "grad_norm", "lr"])
        for s in range(5000):
            loss = 2.5 + 6 * np.exp(-s / 400) + 0.02 * rng.standard_normal()
            if 2500 <= s < 2510:
                loss *= 3
            w.writerow([s, f"{loss:.5f}", f"{0.5 + 0.05 * rng.random():.4f}", f"{3e-4:.2e}"])
    return path


@pytest.fixture
def analyze_available(monkeypatch):
    """The real analyser when it is in the tree; otherwise a stand-in that finds nothing (CLI plumbing only)."""
    if not hasattr(analysis_module, "analyze"):
        monkeypatch.setattr(analysis_module, "analyze", lambda log, **kw: Analysis(log=log, incidents=[]),
                            raising=False)


def test_writes_html_and_png(log_csv, tmp_path, capsys, analyze_available):
    html, png = tmp_path / "r.html", tmp_path / "r.png"
    code = main(["report", str(log_csv), "--html", str(html), "--png", str(png), "--title", "cli run"])
    assert code == 0
    out = capsys.readouterr().out
    assert f"wrote {html}" in out and f"wrote {png}" in out
    text = html.read_text(encoding="utf-8")
    assert "<title>cli run" in text
    data = json.loads(re.search(r'id="lossguard-data">(.*?)</script>', text, re.S).group(1))
    assert [c["metric"] for c in data["charts"]] == ["loss", "grad_norm", "lr"]
    assert data["charts"][0]["traces"][0]["x"] == list(range(5000))  # 5,000 points: drawn whole
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_needs_an_output(log_csv, capsys):
    assert main(["report", str(log_csv)]) == 2
    assert "give --html FILE and/or --png FILE" in capsys.readouterr().err


def test_missing_output_folder_fails_before_reading(tmp_path, capsys):
    code = main(["report", str(tmp_path / "no-such.csv"), "--html", str(tmp_path / "nope" / "r.html")])
    assert code == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err


def test_unreadable_log_is_a_clear_error(tmp_path, capsys, analyze_available):
    bad = tmp_path / "bad.csv"
    bad.write_text("step,loss\n1,2.0\n1,2.1\n")
    assert main(["report", str(bad), "--html", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "bad.csv" in err and "duplicate step 1" in err
