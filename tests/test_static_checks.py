"""The linter (ruff) and the type checker (mypy) pass on ``src/`` with the configuration in pyproject.toml.

Both run as their users run them, ``python -m ruff check src`` and ``python -m mypy`` (which checks
``files = src/lossguard`` from ``[tool.mypy]``), from the repository root.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Findings when this test was written (ruff 0.17.6, mypy 2.4.1): ruff 93 (49 E501, 38 B905, 5 B023,
# 1 B007); mypy 190 in 53 files.
# The lead fixes them after the other branches of issue 22 have landed; then the xfail goes.
pytestmark = [
    pytest.mark.slow,  # mypy over the package: ~60 s on the shared 2 cores
    pytest.mark.xfail(strict=False, reason="src/ is being cleaned in issue 22; see note"),
]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean():
    proc = _run("ruff", "check", "src")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]


def test_mypy_is_clean():
    proc = _run("mypy")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
