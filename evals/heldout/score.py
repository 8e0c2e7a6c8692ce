"""Score `lossguard analyze` on the held-out corpus (the "never tuned on" number).

    PYTHONPATH=src python evals/heldout/score.py [--json OUT] [--root DIR] [pastes|console ...]

Runs the CLI as a user would (`python -m lossguard analyze FILE --json`, one process per file)
and compares with MANIFEST.json:
- read: exit 0 and a `loss` series (or the reader's chosen metric) with points;
- steps: the reader's first/last step equal the manifest's (not judged for "order"/derived numbering);
- events: an incident of a matching kind whose onset or peak lies within two logging intervals
  of the manifest step (for "order" numbering the manifest step is mapped onto the reader's range);
- false alarms: warning/critical incidents on healthy files, and unmatched ones on event files.
It never imports lossguard, so it scores whatever reader the checkout has.
"""
# ruff: noqa: E501 - rendered/printed lines are kept whole, as the trainer or table prints them
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# manifest kind -> incident kinds that count as finding it
MATCH = {
    "spike": {"spike_fast_recovery", "spike_slow_recovery", "spike_no_recovery", "stream_spike", "resume_spike"},
    "nonfinite": {"non_finite"},
    "divergence": {"divergence", "spike_no_recovery", "level_shift"},
    "level_shift": {"level_shift", "divergence"},
    "drop": {"sudden_drop"},
    "loss_scale_collapse": {"loss_scale_collapse"},
}
ALARM = {"warning", "critical"}


def analyze(path: Path) -> tuple[int, dict | None, str]:
    """Run the CLI on one file; return (exit code, parsed JSON or None, first stderr line)."""
    p = subprocess.run([sys.executable, "-m", "lossguard", "analyze", str(path), "--json"],
                       capture_output=True, text=True, timeout=300)
    doc = None
    if p.returncode in (0, 1) and p.stdout.strip():
        try:
            doc = json.loads(p.stdout)
        except json.JSONDecodeError:
            doc = None
    return p.returncode, doc, (p.stderr.strip().splitlines() or [""])[0][:160]


def score_entry(folder: Path, e: dict) -> dict:
    """Score one manifest entry."""
    rc, doc, err = analyze(folder / e["file"])
    res = {"file": f"{folder.name}/{e['file']}", "writer": e["writer"], "healthy": e["healthy"],
           "read": False, "steps_ok": None, "events": len(e["events"]), "found": 0, "false_alarms": 0,
           "incidents": [], "error": err if rc == 2 else ""}
    if doc is None:
        return res
    metric = doc.get("metric", "loss")
    m = doc["run"].get("metrics", {}).get(metric) or {}
    res["read"] = bool(m.get("points"))
    first, last, n = doc["run"].get("first_step"), doc["run"].get("last_step"), m.get("points") or 0
    want = e["steps"]
    if e["step_key"] not in ("order", "epoch*batch"):
        res["steps_ok"] = (first, last) == (want["first"], want["last"])
    inc = [(i["kind"], i["onset"], i["peak"], i["severity"]) for i in doc.get("incidents", [])]
    res["incidents"] = inc
    span = (want["last"] - want["first"]) / max(1, (want["count"] or 2) - 1)
    used = set()
    for ev in e["events"]:
        step, tol = ev["step"], max(1.0, 2 * span)
        if e["step_key"] == "order" and first is not None and last is not None and n > 1:
            # map the manifest's row number onto the reader's own step range
            step = first + (ev["step"] - 1) * (last - first) / (n - 1)
            tol = max(1.0, 2 * (last - first) / (n - 1))
        for k, (kind, onset, peak, _sev) in enumerate(inc):
            if k not in used and kind in MATCH[ev["kind"]] and (abs(onset - step) <= tol or abs(peak - step) <= tol):
                used.add(k)
                res["found"] += 1
                break
    res["false_alarms"] = sum(1 for k, i in enumerate(inc) if k not in used and i[3] in ALARM)
    return res


def main() -> int:
    """Score the folders given (default both) and print a table and totals."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", default=["pastes", "console"])
    ap.add_argument("--json", help="also write every per-file result to this JSON file")
    ap.add_argument("--root", default=str(HERE), help="corpus folder holding pastes/ and console/ (default: this one)")
    args = ap.parse_args()
    root = Path(args.root)
    rows = []
    for sub in args.folders:
        folder = root / sub
        if not (folder / "MANIFEST.json").exists():
            continue
        for e in json.loads((folder / "MANIFEST.json").read_text())["entries"]:
            r = score_entry(folder, e)
            rows.append(r)
            print(f"{r['file']:<60} read={'y' if r['read'] else 'n'} steps={'-' if r['steps_ok'] is None else ('y' if r['steps_ok'] else 'n')}"
                  f" events {r['found']}/{r['events']} false_alarms={r['false_alarms']} {r['error']}")
    for sub in args.folders:
        rs = [r for r in rows if r["file"].startswith(sub + "/")]
        judged = [r for r in rs if r["steps_ok"] is not None]
        print(f"{sub}: read {sum(r['read'] for r in rs)}/{len(rs)}; steps right {sum(bool(r['steps_ok']) for r in judged)}/{len(judged)};"
              f" events found {sum(r['found'] for r in rs)}/{sum(r['events'] for r in rs)};"
              f" healthy files without alarm {sum(1 for r in rs if r['healthy'] and r['read'] and not r['false_alarms'])}/{sum(r['healthy'] for r in rs)};"
              f" false alarms {sum(r['false_alarms'] for r in rs)}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
