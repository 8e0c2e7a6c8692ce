"""The wheel ships the product, not the lab (issue 22).

Builds the wheel as a user would (``pip wheel . --no-deps``) from a copy of the project's packaging
inputs (``pyproject.toml``, ``README.md``, ``src/``), so a stale ``build/`` folder of an earlier
build cannot leak old files into it. ``--no-build-isolation`` uses the installed setuptools, so the
build needs no network. Then checks what the wheel holds: of ``lossguard/testing/`` only the helpers a
user needs to test their own setup, nothing of the evaluation lab (``evals/``), and the demo's data
files (its corpus) still packaged.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# What a user needs to test their own setup: fault injection, a 2-rank launcher, the GPU self-check.
KEPT_TESTING = {"__init__.py", "faults.py", "distributed.py", "gpu_check.py",
                # the GPU self-check's checks, one file per concern (python -m lossguard.testing.gpu_check)
                "gpu_common.py", "gpu_optim_checks.py", "gpu_guard_checks.py", "gpu_resume_checks.py"}

pytestmark = pytest.mark.slow  # a setuptools build: ~20-40 s on the shared 2 cores


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> list[str]:
    """File names inside a wheel freshly built from the working tree."""
    pytest.importorskip("setuptools")
    root = tmp_path_factory.mktemp("wheel")
    project = root / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, project / name)
    shutil.copytree(REPO / "src", project / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    out = root / "dist"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(project), "--no-deps", "--no-build-isolation",
                           "--no-index", "-w", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = list(out.glob("lossguard-*.whl"))
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as zf:
        return zf.namelist()


def test_wheel_holds_no_evaluation_lab(wheel_names):
    testing = {n.split("lossguard/testing/", 1)[1] for n in wheel_names if n.startswith("lossguard/testing/")}
    assert testing == KEPT_TESTING, sorted(testing - KEPT_TESTING)
    assert not [n for n in wheel_names if n.startswith("evals/")]
    # the package proper is there (a wheel of nothing would pass the checks above)
    assert "lossguard/__init__.py" in wheel_names and "lossguard/errors.py" in wheel_names


def test_wheel_keeps_the_demo_and_its_model(wheel_names):
    demo = {n for n in wheel_names if n.startswith("lossguard/demo/")}
    assert "lossguard/demo/model.py" in demo  # the demo owns its model
    assert "lossguard/demo/corpus.txt" in demo  # package-data: demo/*.txt
    assert "lossguard/py.typed" in wheel_names
