"""Sanity checks for the held-out corpus manifests (no lossguard import).

Run from the repository root:  python evals/heldout/check.py [CORPUS_DIR]
Checks, for pastes/ and console/: every listed file exists and every file is listed; each
entry has the schema's fields and event kinds; every spot value in ``loss_at`` and the first
and last step occur as numbers in the file's text (so a manifest typo is caught). It does not
parse the logs - that is the reader's job, and this corpus exists to test it.
"""
from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
KINDS = {"spike", "nonfinite", "divergence", "level_shift", "drop", "loss_scale_collapse"}
FIELDS = {"file", "writer", "source", "healthy", "step_key", "loss_key", "steps", "loss_at", "events", "notes"}
# numbers as printed: 1,000 / 7.9321 / 6.758929E+00 ; ANSI codes are stripped first
NUM = re.compile(r"(?<![\w.])[-+]?\d{1,3}(?:,\d{3})+(?![\d.])|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def numbers(text: str) -> list[float]:
    """Every number in ``text`` (thousands separators removed)."""
    return [float(m.replace(",", "")) for m in NUM.findall(ANSI.sub("", text))]


def check_folder(folder: Path) -> list[str]:
    """Return the problems found in one corpus folder."""
    problems: list[str] = []
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    listed = set()
    for e in manifest["entries"]:
        name = e.get("file", "?")
        listed.add(name)
        missing = FIELDS - e.keys()
        if missing:
            problems.append(f"{name}: missing fields {sorted(missing)}")
            continue
        path = folder / name
        if not path.is_file():
            problems.append(f"{name}: file not found")
            continue
        nums = numbers(path.read_text(encoding="utf-8", errors="replace"))
        bag = set(nums) | {abs(n) for n in nums}  # "2251-2625" reads as 2251, -2625
        for k in e["events"]:
            if k["kind"] not in KINDS:
                problems.append(f"{name}: unknown event kind {k['kind']}")
        if e["healthy"] != (not e["events"]):
            problems.append(f"{name}: healthy flag disagrees with events")
        # "order" and derived "epoch*batch" numberings need not be printed as such
        if e["step_key"] not in ("order", "epoch*batch"):
            for which in ("first", "last"):
                v = e["steps"][which]
                if v is not None and float(v) not in bag:
                    problems.append(f"{name}: steps.{which}={v} not printed in file")
        for step, val in e["loss_at"].items():
            if not any(math.isclose(val, n, rel_tol=1e-9, abs_tol=1e-12) for n in nums):
                problems.append(f"{name}: loss_at[{step}]={val} not printed in file")
    on_disk = {p.name for p in folder.iterdir() if p.is_file() and p.name != "MANIFEST.json"}
    for extra in sorted(on_disk - listed):
        problems.append(f"{extra}: not in MANIFEST.json")
    return problems


def main() -> int:
    """Check both folders; print problems; exit 1 if any."""
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE
    problems = []
    for sub in ("pastes", "console"):
        if (root / sub / "MANIFEST.json").exists():
            problems += [f"{sub}/{p}" for p in check_folder(root / sub)]
    for p in problems:
        print(p)
    print("ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
