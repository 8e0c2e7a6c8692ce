"""Inputs that try to break the readers: time and peak memory of each, in a fresh subprocess.

Cases (sizes scaled by ``--mb``):

* ``jsonl wide string``: 200 small rows and one row with a ``--mb`` MB string field.
* ``jsonl many keys``: one record with ``--keys`` numeric keys among 200 normal rows.
* ``csv valid`` / ``csv bad last cell``: a ``--mb`` x 5 MB CSV, and the same file with one
  non-numeric ``loss`` cell in its last row (the error must come at the valid read's speed).
* ``csv half-written last line`` / ``jsonl half-written last line``: the writer killed mid-line.

Each read runs as ``read_log(path)`` in its own interpreter; memory is the peak RSS growth over the
RSS after imports (``VmHWM`` minus ``VmRSS`` before the read), so pyarrow's allocator counts.

    .venv/bin/python benchmarks/read_adversarial.py            # --mb 10 (CSV 50 MB)
    .venv/bin/python benchmarks/read_adversarial.py --mb 2     # quick
    .venv/bin/python benchmarks/read_adversarial.py --cases csv   # only the CSV cases
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import json, resource, sys, time
from lossguard.io import read_log
import pyarrow.csv, pyarrow.json  # the readers import these lazily: count them as imports, not as the read
from lossguard.errors import LossguardError
def rss(key='VmRSS:'):
    for line in open('/proc/self/status'):
        if line.startswith(key):
            return int(line.split()[1])
base = rss()
t = time.perf_counter()
try:
    log = read_log(sys.argv[1])
    outcome = f"read: {sum(len(s) for s in log.series.values())} points, {len(log.series)} metrics"
    if log.metadata.get('warnings'):
        outcome += '; warning: ' + log.metadata['warnings'][0][:90]
except LossguardError as exc:
    outcome = 'error: ' + str(exc).splitlines()[0][-110:]
seconds = time.perf_counter() - t
peak = rss('VmHWM:')  # this image's peak; ru_maxrss may carry the forking parent's
print(json.dumps({'seconds': seconds, 'peak_mb': (peak - base) / 1024, 'outcome': outcome}))
"""


def write_cases(d: Path, mb: float, keys: int) -> dict[str, Path]:
    """Write every case's file into ``d``; returns name -> path."""
    rows = [{"step": i, "loss": 2.0 - i * 1e-3, "lr": 1e-4} for i in range(200)]
    cases = {}
    p = d / "wide.jsonl"
    with open(p, "w") as f:
        for r in rows:
            if r["step"] == 100:
                r = {**r, "note": "x" * int(mb * 1e6)}
            f.write(json.dumps(r) + "\n")
    cases["jsonl wide string"] = p
    p = d / "keys.jsonl"
    with open(p, "w") as f:
        for r in rows:
            if r["step"] == 100:
                r = {**r, **{f"k{j}": float(j) for j in range(keys)}}
            f.write(json.dumps(r) + "\n")
    cases["jsonl many keys"] = p
    n = int(mb * 5e6 / 42)  # about 42 bytes a row
    p = d / "valid.csv"
    with open(p, "w") as f:
        f.write("step,loss,grad_norm,lr\n")
        block = []
        for i in range(n):
            block.append(f"{i},{2.0 + (i % 97) * 1e-3!r},{0.3 + (i % 89) * 1e-4!r},{1e-4 * (1 + i % 7) / 7!r}\n")
            if len(block) == 10000:
                f.write("".join(block))
                block = []
        f.write("".join(block))
    cases["csv valid"] = p
    bad = d / "bad_last.csv"
    data = p.read_bytes()
    cut = data.rstrip(b"\n").rfind(b"\n") + 1
    last = data[cut:].split(b",")
    last[1] = b"2.0x"
    bad.write_bytes(data[:cut] + b",".join(last))
    cases["csv bad last cell"] = bad
    half = d / "half.csv"
    half.write_bytes(data[:cut + 8])  # the last row cut inside its second cell
    cases["csv half-written last line"] = half
    half = d / "half.jsonl"
    text = "".join(json.dumps(r) + "\n" for r in rows)
    half.write_text(text[:-12])
    cases["jsonl half-written last line"] = half
    return cases


def measure(path: Path, timeout: float) -> dict:
    """Run one read in a fresh interpreter; its seconds, peak MB and outcome."""
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"seconds": timeout, "peak_mb": float("nan"), "outcome": f"killed after {timeout:.0f} s"}
    if done.returncode != 0:
        return {"seconds": float("nan"), "peak_mb": float("nan"), "outcome": "crash: " + done.stderr[-200:]}
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=10.0, help="size of the wide field (MB); the CSV is 5x this")
    ap.add_argument("--keys", type=int, default=700_000, help="numeric keys in the one wide JSONL record")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--cases", default=None, help="comma list of case-name words to run (default: all)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cases = write_cases(Path(tmp), args.mb, args.keys)
        print(f"| case | file MB | seconds | peak MB over imports | outcome |\n|---|---:|---:|---:|---|")
        results = {}
        wanted = None if args.cases is None else [w.strip() for w in args.cases.split(",")]
        for name, path in cases.items():
            if wanted is not None and not any(w in name for w in wanted) and name != "csv valid":
                continue
            r = measure(path, args.timeout)
            results[name] = r
            print(f"| {name} | {path.stat().st_size / 1e6:.1f} | {r['seconds']:.2f} | {r['peak_mb']:.0f} | "
                  f"{r['outcome']} |", flush=True)
        if "csv bad last cell" not in results:
            return
        ok, bad = results["csv valid"], results["csv bad last cell"]
        print(f"\nbad-last-cell / valid CSV: time {bad['seconds'] / ok['seconds']:.2f}x, "
              f"memory {bad['peak_mb'] / max(ok['peak_mb'], 1):.2f}x")


if __name__ == "__main__":
    main()
