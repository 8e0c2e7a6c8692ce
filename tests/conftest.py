"""Shared fixtures: paths to shipped examples and to the real logs copied into tests/data, and the
real-writer tests' check of a log read back."""
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
# The evaluation lab (evals/: training scripts, generators, scorers) lives at the repository root, not in
# the package. pyproject's `pythonpath = ["."]` puts the root on this process's sys.path; the tests'
# subprocesses (`python -m evals.train_loop`, torchrun `-m evals.fsdp_train_loop`, ...) inherit it here.
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])


@pytest.fixture(scope="session")
def real_logs() -> Path:
    """The real published training logs shipped with the tests."""
    return REAL_LOGS


def _check_live(log, truth) -> None:
    """Every metric of ``truth`` (``{metric: {step: value}}``) is the log's live series, exactly
    (compared in float32: the writers store float32)."""
    import numpy as np

    for metric, points in truth.items():
        steps, values = log.live(metric)
        assert steps.tolist() == sorted(points), metric
        expected = np.array([points[s] for s in sorted(points)], dtype=np.float32)
        np.testing.assert_array_equal(values.astype(np.float32), expected, err_msg=metric)


@pytest.fixture(scope="session")
def check_live():
    """The real-writer tests' check that a log read back holds exactly the points written."""
    return _check_live
