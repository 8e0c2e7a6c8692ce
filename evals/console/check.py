"""Self-check of the trainer console corpus: ``python -m evals.console.check``.

1. Regenerates every fixture in a temporary folder and compares it byte for byte with tests/data/console/
   (the committed corpus is exactly what the generator writes: deterministic and up to date).
2. Validates MANIFEST.json against CORPUS_SCHEMA.md (fields, event kinds, healthy <=> no events, steps consistent).
3. Checks that every ``loss_at`` value really is printed in its file (the numbers of the file, ANSI stripped, are
   scanned; a value counts as found when some printed number equals it to the printed precision).
Prints a summary (trainers, formats, files, events by kind, healthy files, size) and exits 1 on any failure.
"""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from evals.console import render
from evals.console.curve import EventKind

KINDS = {k.value for k in EventKind} | {"drop"}
FIELDS = {"file", "writer", "source", "healthy", "step_key", "loss_key", "steps", "loss_at", "events", "notes"}
OPTIONAL = {"read_with", "warns"}
"""Fields of an entry whose text lacks what the reader needs: the flags to read it and the warning asking for them."""
NUM = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def format_key(spec: render.Spec) -> tuple[str, str]:
    """(writer, renderer) identifying a distinct line format (a lambda counts by its source line)."""
    fn = spec.render
    name = fn.__name__ if fn.__name__ != "<lambda>" else f"lambda@{fn.__code__.co_firstlineno}"
    return spec.writer, f"{fn.__module__}.{name}"


def _found(text_numbers: set[str], value: float) -> bool:
    for tok in text_numbers:
        try:
            x = float(tok)
        except ValueError:
            continue
        if math.isnan(value) and math.isnan(x):
            return True
        if math.isfinite(x) and abs(x - value) <= 1e-9 * max(1.0, abs(value)):
            return True
    return False


def table() -> str:
    """The markdown table of trainers, fixtures, events and sources (for evals/README.md)."""
    entries = json.loads((render.OUT / "MANIFEST.json").read_text())["entries"]
    by: dict[str, list[dict]] = {}
    for e in entries:
        by.setdefault(e["writer"], []).append(e)
    rows = ["| trainer | fixtures (events at step) | step / loss key | source of the format |", "|---|---|---|---|"]
    for w, es in by.items():
        fx = "<br>".join("`%s` (%s)" % (e["file"], ", ".join("%s@%d" % (v["kind"], v["step"]) for v in e["events"]) or "healthy")
                         for e in es)
        keys = "; ".join(sorted({"%s / %s" % (e["step_key"], e["loss_key"]) for e in es}))
        rows.append(f"| {w} | {fx} | {keys} | {es[0]['source']} |")
    return "\n".join(rows)


def main() -> int:
    """Run all checks; print the summary; 0 when everything holds."""
    if "--table" in sys.argv:
        print(table())
        return 0
    folder = render.OUT
    errors: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        render.main(Path(tmp))
        for f in sorted(Path(tmp).iterdir()):
            committed = folder / f.name
            if not committed.exists() or committed.read_bytes() != f.read_bytes():
                errors.append(f"{f.name}: differs from a fresh render (run python -m evals.console.render)")
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    if manifest.get("version") != 1:
        errors.append("MANIFEST version is not 1")
    entries = manifest["entries"]
    kinds: Counter[str] = Counter()
    for e in entries:
        name = e.get("file", "?")
        if not FIELDS <= set(e) <= FIELDS | OPTIONAL or ("read_with" in e) != ("warns" in e):
            errors.append(f"{name}: fields {sorted(set(e) ^ FIELDS)} differ from the schema")
            continue
        st = e["steps"]
        if not (isinstance(st["first"], int) and isinstance(st["last"], int) and st["first"] <= st["last"] and st["count"] > 0):
            errors.append(f"{name}: bad steps {st}")
        if e["healthy"] != (not e["events"]):
            errors.append(f"{name}: healthy={e['healthy']} but events={e['events']}")
        for ev in e["events"]:
            kinds[ev["kind"]] += 1
            # a loss-scale collapse may outlive the loss series (Megatron stops printing real losses)
            last_ok = math.inf if ev["kind"] == EventKind.LOSS_SCALE_COLLAPSE.value else st["last"] + 1
            if ev["kind"] not in KINDS or not (st["first"] <= ev["step"] <= last_ok):
                errors.append(f"{name}: bad event {ev}")
        text = ANSI.sub("", (folder / name).read_text(encoding="utf-8"))
        numbers = set(NUM.findall(text))
        for step, value in e["loss_at"].items():
            if not (st["first"] <= int(step) <= st["last"]):
                errors.append(f"{name}: loss_at step {step} outside {st}")
            if not _found(numbers, value):
                errors.append(f"{name}: loss_at {step}={value} is not printed in the file")
    specs = render.all_specs()
    writers = {s.writer for s in specs}
    formats = {format_key(s) for s in specs}
    size = sum(p.stat().st_size for p in folder.iterdir())
    healthy = sum(1 for e in entries if e["healthy"])
    print(f"trainers (writers): {len(writers)}; formats: {len(formats)}; files: {len(entries)} "
          f"({healthy} healthy, {len(entries) - healthy} with events); events: {sum(kinds.values())} {dict(kinds)}; "
          f"folder size: {size / 1e6:.2f} MB")
    for err in errors:
        print("FAIL", err)
    print("OK" if not errors else f"{len(errors)} failures")
    return 0 if not errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
