"""Reading speed and memory: lossguard's readers against pandas, pyarrow and losslint, in one run.

Writes an N-step log (default 1,000,000 steps; columns step, loss, grad_norm, lr, floats written at
full precision the way Python loggers write them) as CSV and JSONL (and TensorBoard through helper
B's ``benchmarks/read_tensorboard.py`` when it exists), then times every reader on the same files.
Each reader runs in its own fresh subprocess so that memory numbers do not mix: the time is the best
of ``--repeat`` reads after imports; memory is the peak RSS growth over the RSS after imports
(``ru_maxrss`` minus ``VmRSS`` before the first read), which counts pyarrow's own allocator too.
``losslint`` is run as its users run it, ``losslint check FILE`` on the command line, timed end to
end (interpreter start included) with its peak RSS from ``RUSAGE_CHILDREN``.

    .venv/bin/python benchmarks/read.py                 # 1,000,000 steps
    .venv/bin/python benchmarks/read.py --steps 100000  # quick
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RAW_BYTES_PER_STEP = 4 * 8  # int64 step + three float64 values: the arrays the log really holds

# name -> (format, python statement reading `path`); run by `--run-one`.
CANDIDATES = {
    "lossguard read_log (csv)": ("csv", "from lossguard.io import read_log", "read_log(path)"),
    "lossguard csv, stdlib path": ("csv", "from lossguard.io import csv as r; from pathlib import Path",
                                   "r.read(Path(path), fast=False)"),
    "pandas.read_csv": ("csv", "import pandas as pd", "pd.read_csv(path)"),
    "pyarrow.csv.read_csv": ("csv", "import pyarrow.csv as pc", "pc.read_csv(path)"),
    "lossguard read_log (jsonl)": ("jsonl", "from lossguard.io import read_log", "read_log(path)"),
    "lossguard jsonl, stdlib path": ("jsonl", "from lossguard.io import jsonl as r; from pathlib import Path",
                                     "r.read(Path(path), fast=False)"),
    "pyarrow.json.read_json": ("jsonl", "import pyarrow.json as pj", "pj.read_json(path)"),
}
REFERENCE = {"csv": "pyarrow.csv.read_csv", "jsonl": "pyarrow.json.read_json",
             "tensorboard": "tensorboard EventAccumulator (size_guidance 0)"}
TB_NAMES = {"lossguard": "lossguard tensorboard.read", "EventAccumulator": REFERENCE["tensorboard"],
            "tbparse": "tbparse SummaryReader.scalars"}


def write_logs(n: int, workdir: Path) -> dict[str, Path]:
    """Write the N-step CSV and JSONL logs (same numbers in both)."""
    import numpy as np

    rng = np.random.default_rng(0)
    steps = np.arange(n)
    loss = 10.0 * np.exp(-steps / max(n / 5, 1)) + 2.0 + 0.05 * rng.standard_normal(n)
    grad = np.abs(0.3 + 0.05 * rng.standard_normal(n))
    lr = 3e-4 * np.minimum(1.0, (steps + 1) / 2000)
    paths = {"csv": workdir / "log.csv", "jsonl": workdir / "log.jsonl"}
    cols = [loss.tolist(), grad.tolist(), lr.tolist()]
    with open(paths["csv"], "w") as f:
        f.write("step,loss,grad_norm,lr\n")
        f.writelines(f"{s},{a!r},{b!r},{c!r}\n" for s, a, b, c in zip(steps.tolist(), *cols))
    with open(paths["jsonl"], "w") as f:
        f.writelines(f'{{"step": {s}, "loss": {a!r}, "grad_norm": {b!r}, "lr": {c!r}}}\n'
                     for s, a, b, c in zip(steps.tolist(), *cols))
    return paths


def _rss_now() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def run_one(name: str, path: str, repeat: int) -> dict:
    """In a fresh process: import, then time ``repeat`` reads; report best time and peak RSS growth."""
    fmt, setup, stmt = CANDIDATES[name]
    scope: dict = {"path": path}
    exec(setup, scope)
    # Warm-up on the file's first 20,000 lines, so that lazy imports (pyarrow inside read_log) and
    # the first-use paging-in of pyarrow's parser code are not counted as memory of the read.
    tiny = Path(tempfile.mkdtemp()) / f"warmup.{fmt}"
    with open(path, "rb") as src, open(tiny, "wb") as dst:
        dst.writelines(line for _, line in zip(range(20_000), src))
    eval(stmt, {**scope, "path": str(tiny)})
    base = _rss_now()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        out = eval(stmt, scope)
        best = min(best, time.perf_counter() - t)
        del out
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"seconds": best, "peak_bytes": max(peak - base, 0)}


def measure(name: str, path: Path, repeat: int) -> dict:
    cmd = [sys.executable, __file__, "--run-one", name, "--file", str(path), "--repeat", str(repeat)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        return {"error": res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"}
    return json.loads(res.stdout.strip().splitlines()[-1])


def measure_losslint(path: Path) -> dict:
    """``losslint check FILE`` end to end, in a subprocess that reports its child's peak RSS."""
    exe = shutil.which("losslint") or str(Path(sys.executable).with_name("losslint"))
    if not Path(exe).exists():
        return {"error": "losslint not installed (pip install 'lossguard[bench]')"}
    code = ("import resource, subprocess, sys, time, json\n"
            "t = time.perf_counter()\n"
            f"r = subprocess.run([{exe!r}, 'check', '--format', 'json', {str(path)!r}], capture_output=True)\n"
            "dt = time.perf_counter() - t\n"
            "print(json.dumps({'seconds': dt, 'peak_bytes': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss"
            " * 1024, 'exit': r.returncode, 'err': r.stderr.decode()[-300:]}))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=3600)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if out["exit"] not in (0, 1):  # 1 = findings, a normal outcome for a linter
        return {"error": f"losslint exit {out['exit']}: {out['err'].strip()[-200:]}"}
    out["note"] = "end to end, interpreter start included; peak RSS is the whole process"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1_000_000, help="steps in the generated logs")
    ap.add_argument("--repeat", type=int, default=3, help="reads per reader (best time is reported)")
    ap.add_argument("--workdir", type=Path, default=None, help="where to write the logs (default: a temp dir)")
    ap.add_argument("--no-losslint", action="store_true", help="skip losslint (it is slow on large files)")
    ap.add_argument("--no-tensorboard", action="store_true", help="skip the TensorBoard rows")
    ap.add_argument("--only", default=None, help="run only readers whose name contains this text")
    ap.add_argument("--run-one", help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run_one:
        print(json.dumps(run_one(args.run_one, args.file, args.repeat)))
        return 0

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="lossguard-bench-read-"))
    workdir.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    marker = workdir / f"steps-{args.steps}"
    if marker.exists():  # same --workdir and --steps: reuse the logs written last time
        paths = {"csv": workdir / "log.csv", "jsonl": workdir / "log.jsonl"}
    else:
        paths = write_logs(args.steps, workdir)
        marker.touch()
    print(f"wrote {args.steps:,}-step logs in {time.perf_counter() - t:.1f}s: "
          + ", ".join(f"{k} {p.stat().st_size / 1e6:.0f} MB" for k, p in paths.items()), file=sys.stderr)
    raw = args.steps * RAW_BYTES_PER_STEP
    rows = []
    def done(row: dict) -> None:
        rows.append(row)
        print(f"    {json.dumps(row)}", file=sys.stderr, flush=True)

    for name, (fmt, _, _) in CANDIDATES.items():
        if args.only and args.only not in name:
            continue
        print(f"  {name} ...", file=sys.stderr, flush=True)
        done({"format": fmt, "reader": name, **measure(name, paths[fmt], args.repeat)})
    if not args.no_losslint and not args.only:
        for fmt in ("csv", "jsonl"):
            print(f"  losslint check ({fmt}) ...", file=sys.stderr, flush=True)
            done({"format": fmt, "reader": f"losslint check ({fmt}, CLI)", **measure_losslint(paths[fmt])})
    print(table(rows, raw, args.steps), file=sys.stderr, flush=True)  # in case the TensorBoard part is slow
    tb = HERE / "read_tensorboard.py"
    if tb.exists() and not args.no_tensorboard and not args.only:
        sys.path.insert(0, str(HERE))
        try:
            from read_tensorboard import bench_tensorboard  # helper B's benchmark

            print("  tensorboard (benchmarks/read_tensorboard.py) ...", file=sys.stderr, flush=True)
            for r in bench_tensorboard(args.steps, workdir):  # rows: tool, seconds, points, peak_mb
                row = {"format": "tensorboard", "reader": TB_NAMES.get(r["tool"], r["tool"]), "seconds": r["seconds"],
                       "peak_bytes": r["peak_mb"] * 1e6}
                done({**row, "error": r["error"]} if "error" in r else row)
        except Exception as exc:  # noqa: BLE001 - report, do not lose the other numbers
            rows.append({"format": "tensorboard", "reader": "bench_tensorboard", "error": repr(exc)})
    print(table(rows, raw, args.steps))
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def table(rows: list[dict], raw: int, steps: int) -> str:
    """Markdown table with time ratios against the reference reader of each format."""
    ref = {r["format"]: r.get("seconds") for r in rows if r.get("reader") == REFERENCE.get(r["format"])}
    out = [f"{steps:,} steps; raw arrays (int64 step + 3 float64 columns) = {raw / 1e6:.0f} MB", "",
           "| format | reader | time (s) | time / reference | peak RSS growth (MB) | memory / raw arrays |",
           "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['format']} | {r.get('reader', '?')} | error: {r['error']} | | | |")
            continue
        base = ref.get(r["format"])
        ratio = f"{r['seconds'] / base:.2f}x" if base else "-"
        mem = r.get("peak_bytes")
        out.append(f"| {r['format']} | {r['reader']} | {r['seconds']:.3f} | {ratio} | "
                   f"{'-' if mem is None else f'{mem / 1e6:.0f}'} | {'-' if mem is None else f'{mem / raw:.2f}x'} |")
    out.append("")
    out.append("reference: " + ", ".join(f"{k} = {v}" for k, v in REFERENCE.items()))
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
