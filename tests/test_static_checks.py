"""The linter (ruff) and the type checker (mypy) pass on ``src/`` with the configuration in pyproject.toml.

Both run as their users run them, ``python -m ruff check src`` and ``python -m mypy`` (which checks
``files = src/lossguard`` from ``[tool.mypy]``), from the repository root. Both are in the ``test``
extra, so CI installs them.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # mypy over the package: ~40 s on the shared 2 cores (cold cache)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean():
    proc = _run("ruff", "check", "src")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]


def test_mypy_is_clean():
    proc = _run("mypy")
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
