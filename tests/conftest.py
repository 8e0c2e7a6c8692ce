"""Shared fixtures: paths to shipped examples and to the real logs in ../shared."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
REAL_LOGS = REPO.parent / "shared" / "real-logs"
IN_CI = os.environ.get("CI") == "true"


@pytest.fixture(scope="session")
def real_logs() -> Path:
    """The real-logs folder beside the repo; CI always has it, a bare clone may not."""
    if not REAL_LOGS.is_dir():
        if IN_CI:
            pytest.fail(f"{REAL_LOGS} is missing; CI must run with ../shared beside the repo")
        pytest.skip(f"{REAL_LOGS} not present (clone with ../shared beside the repo to run this test)")
    return REAL_LOGS
