"""The README's plain loop resumes exactly, as written: ``lossguard verify-resume`` on it passes.

``examples/readme_loop.py`` is the README's "Guard a live run" block made runnable (the README's
``DataLoader(dataset, batch_sampler=sampler)``, not ``ResumableLoader``). Before issue 10 it
resumed exactly in 0 of 4 trials: creating the DataLoader iterator after the RNG was restored drew
one number from torch's global RNG and shifted every dropout mask after the resume.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from lossguard.cli import main

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "readme_loop.py"


def _code(text: str) -> set[str]:
    """Code lines without comments and surrounding space."""
    return {re.sub(r"\s+#.*$", "", line).strip() for line in text.splitlines() if line.strip()}


def test_the_example_is_the_readmes_loop():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index("## Guard a live run"):]
    block = block[block.index("```python") + 9:block.index("```", block.index("```python") + 9)]
    example = _code(EXAMPLE.read_text(encoding="utf-8"))
    for line in ("sampler = ResumableSampler(len(dataset), batch_size=32, seed=0)",
                 "loader = DataLoader(dataset, batch_sampler=sampler)", "if store.steps():", "guard.restore()",
                 "loss.backward()", "guard.step(loss)"):
        assert line in _code(block), line
        assert line in example, line


@pytest.mark.slow  # three fresh interpreters training 20-40 steps each: ~20-40 s on the loaded 2-core machine
def test_verify_resume_passes_on_the_readme_loop(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["verify-resume", "--", sys.executable, str(EXAMPLE), "--steps", "40"]) == 0
    out = capsys.readouterr().out
    assert "every step's loss matches bitwise" in out and "RESULT: resume is exact" in out
