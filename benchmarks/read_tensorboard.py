"""Benchmark: reading a TensorBoard event file of N steps x 3 scalar tags.

Compares, in the same run and on the same file (written once by ``tensorboardX.SummaryWriter``):

* lossguard's reader (``lossguard.io.tensorboard.read``; both CRCs of every record checked),
* tensorboard's ``EventAccumulator`` with ``size_guidance={"scalars": 0}`` (keep every point),
* ``tbparse.SummaryReader(...).scalars``.

Each tool runs in its own fresh Python process, so imports, caches and memory do not leak between
them. ``seconds`` is wall time of the read alone (imports excluded); ``peak_mb`` is the growth of
peak resident memory during the read (``VmHWM``, reset just before, minus RSS before; lossguard
maps the file, and the pages it touches count). Before timing, the file is read once so that every tool finds it
in the page cache.

Run: ``python benchmarks/read_tensorboard.py --steps 1000000``
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TAGS = ("train/loss", "train/grad_norm", "train/lr")
TOOLS = ("lossguard", "EventAccumulator", "tbparse")


def write_fixture(n_steps: int, workdir: Path) -> Path:
    """Write (once; reused when already complete) ``n_steps`` x 3 tags with tensorboardX."""
    import numpy as np
    import tensorboardX

    run = Path(workdir) / f"tb_{n_steps}"
    marker = run / "COMPLETE"
    if marker.exists():
        return run
    run.mkdir(parents=True, exist_ok=True)
    for old in run.glob("events.out.tfevents.*"):
        old.unlink()
    rng = np.random.default_rng(0)
    loss, grad, lr = rng.random(n_steps), rng.random(n_steps), rng.random(n_steps)
    w = tensorboardX.SummaryWriter(str(run), flush_secs=3600, max_queue=100_000)
    for i in range(n_steps):
        w.add_scalar(TAGS[0], float(loss[i]), i)
        w.add_scalar(TAGS[1], float(grad[i]), i)
        w.add_scalar(TAGS[2], float(lr[i]), i)
    w.close()
    marker.write_text(str(n_steps))
    return run


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mb() -> float:
    """VmHWM: peak resident memory of this process (ru_maxrss would include the parent's)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # Linux: reset VmHWM to the current RSS
    except OSError:
        pass


def _child(tool: str, run: Path) -> dict:
    """Runs inside a fresh process: import the tool, then time one full read."""
    if tool == "lossguard":
        from lossguard.io.tensorboard import read

        def go() -> int:
            log = read(run)
            return sum(len(s) for s in log.series.values())
    elif tool == "EventAccumulator":
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        def go() -> int:
            acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
            acc.Reload()
            return sum(len(acc.Scalars(t)) for t in acc.Tags()["scalars"])
    elif tool == "tbparse":
        from tbparse import SummaryReader

        def go() -> int:
            return len(SummaryReader(str(run)).scalars)
    else:
        raise SystemExit(f"unknown tool {tool}")
    _reset_peak()
    before = _rss_mb()
    start = time.perf_counter()
    points = go()
    seconds = time.perf_counter() - start
    peak = _peak_mb()
    return {"tool": tool, "seconds": seconds, "points": points, "peak_mb": max(0.0, peak - before)}


def bench_tensorboard(n_steps: int, workdir: Path) -> list[dict]:
    """Write the file once with tensorboardX and time every tool on it.

    Returns:
        One row per tool: ``{"tool", "seconds", "points", "peak_mb"}``.
    """
    run = write_fixture(n_steps, Path(workdir))
    for f in run.glob("events.out.tfevents.*"):
        f.read_bytes()  # warm the page cache so no tool pays for the disk
    rows = []
    for tool in TOOLS:
        out = subprocess.run([sys.executable, __file__, "--child", tool, str(run)],
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            rows.append({"tool": tool, "seconds": float("nan"), "points": 0, "peak_mb": float("nan"),
                         "error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"})
            continue
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


def _table(rows: list[dict], n_steps: int) -> str:
    ours = next(r["seconds"] for r in rows if r["tool"] == "lossguard")
    lines = [f"TensorBoard event file, {n_steps:,} steps x {len(TAGS)} tags (written by tensorboardX)",
             f"{'tool':<18}{'seconds':>10}{'points':>12}{'peak MB':>10}{'vs lossguard':>14}",
             "-" * 64]
    for r in rows:
        ratio = r["seconds"] / ours if ours else float("nan")
        lines.append(f"{r['tool']:<18}{r['seconds']:>10.2f}{r['points']:>12,}{r['peak_mb']:>10.0f}{ratio:>13.1f}x"
                     + (f"  ({r['error']})" if "error" in r else ""))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000, help="steps to write (3 tags each)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "lossguard-bench",
                        help="where the event file is written (reused between runs)")
    parser.add_argument("--child", nargs=2, metavar=("TOOL", "RUN"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child[0], Path(args.child[1]))))
        return
    rows = bench_tensorboard(args.steps, args.workdir)
    print(_table(rows, args.steps))


if __name__ == "__main__":
    main()
