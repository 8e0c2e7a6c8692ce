"""Regenerate every console fixture and MANIFEST.json, deterministically.

Run from the repository root: ``python -m evals.console.render`` (or ``python evals/console/render.py``).
Writes tests/data/console/<file> for every ``Spec`` of every family module listed in ``FAMILIES``.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # allow `python evals/console/render.py`
    sys.path.insert(0, str(ROOT))

from evals.console.fixture import Run, Spec

FAMILIES = [
    "torchtitan", "karpathy", "megatron", "keras", "hf", "lightning", "litgpt", "olmo", "composer", "fairseq", "jax", "misc_torch", "vision", "recipes", "classic", "tqdm_scripts",
]
"""Family modules (evals/console/<name>.py), each exposing ``FIXTURES: list[Spec]``."""

OUT = ROOT / "tests" / "data" / "console"


def all_specs() -> list[Spec]:
    """Every fixture plan, in MANIFEST order."""
    specs: list[Spec] = []
    for name in FAMILIES:
        specs.extend(importlib.import_module(f"evals.console.{name}").FIXTURES)
    files = [s.file for s in specs]
    dup = {f for f in files if files.count(f) > 1}
    if dup:
        raise SystemExit(f"duplicate fixture names: {sorted(dup)}")
    return specs


def main(out: Path = OUT) -> int:
    """Write all fixtures and the MANIFEST into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for spec in all_specs():
        run = Run.plan(spec)
        text = spec.render(run)
        (out / spec.file).write_text(text, encoding="utf-8", newline="")
        entries.append(run.entry())
    (out / "MANIFEST.json").write_text(json.dumps({"version": 1, "entries": entries}, indent=1) + "\n",
                                       encoding="utf-8")
    print(f"wrote {len(entries)} fixtures to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
