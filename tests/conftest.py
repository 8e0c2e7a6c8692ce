"""Shared fixtures: paths to shipped examples and to the real logs copied into tests/data."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
DATA = REPO / "tests" / "data"
# Copies of ../shared/real-logs (sources and licences in tests/data/real-logs/README.md), so the suite
# passes from a clone of this repository alone.
REAL_LOGS = DATA / "real-logs"
IN_CI = os.environ.get("CI") == "true"


@pytest.fixture(scope="session")
def real_logs() -> Path:
    """The real published training logs shipped with the tests."""
    return REAL_LOGS
