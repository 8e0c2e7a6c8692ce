"""Shared fixtures: paths to shipped examples and to the real logs copied into tests/data, and the
real-writer tests' check of a log read back."""
from __future__ import annotations

import os
import subprocess
import sys
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


SHORT_DEMO_STEPS = 120
"""Steps of the shared short demo: its pocket moves to steps // 2 = 60, length 12 (``DemoConfig.scenario_obj``)."""


@pytest.fixture(scope="session")
def short_demo(tmp_path_factory):
    """``lossguard demo --steps 120 --no-clean --json`` run once through the real CLI in a subprocess:
    ``(out_dir, completed_process)``. tests/test_demo.py checks its outputs, tests/test_simulate_live.py
    replays its unguarded log against its guarded run (one demo run serves both)."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("demo") / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "lossguard", "demo", "--out", str(out), "--steps",
                           str(SHORT_DEMO_STEPS), "--no-clean", "--json"], capture_output=True, text=True,
                          timeout=600, env=env)
    return out, proc


@pytest.fixture
def preads(monkeypatch):
    """Lengths of every re-read (pread) the verified load's CRC check makes
    (:mod:`lossguard.checkpoint.crc_ranges`), in order."""
    from lossguard.checkpoint import crc_ranges

    lengths: list[int] = []
    real = crc_ranges._pread_into

    def counting(extend, value, fd, offset, length):
        lengths.append(length)
        return real(extend, value, fd, offset, length)

    monkeypatch.setattr(crc_ranges, "_pread_into", counting)
    return lengths
