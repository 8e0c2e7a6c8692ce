"""The text grammar's speed: ``lossguard analyze`` of a console log with colour codes against the
same data as CSV (whole process, interpreter start included), and recognising a large text that is
no log (``detect_format``, in process).

Writes an N-line torchtitan-style console log (ANSI colour codes between each label and its number,
a ``[rank0]:`` prefix; default 1,000,000 lines), the same steps and values as a CSV, and a 100 MB
text of prose with numbers in it. Goals (issue 18): the console log at most 3x the CSV; the non-log
text recognised as no log in under 1 s.

    PYTHONPATH=src .venv/bin/python benchmarks/read_text.py                 # 1,000,000 lines, 100 MB
    PYTHONPATH=src .venv/bin/python benchmarks/read_text.py --lines 100000 --prose-mb 10   # quick
    PYTHONPATH=src .venv/bin/python benchmarks/read_text.py --shapes torchtitan+eval,megatron,hf-dict --grammar
"""
from __future__ import annotations

import argparse
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _titan(step: int, loss: float, gn: float, lr: float) -> str:
    red, green, yellow, blue, reset = "\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[34m", "\x1b[39m"
    return (f"[rank0]:[titan] 2025-01-01 10:00:00,000 - root - INFO - {red}step: {step:2}  {green}loss: "
            f"{loss:7.4f}  {yellow}grad_norm: {gn:7.4f}  {blue}lr: {lr:.4e}  memory: 41.2GiB(52.1%)  "
            f"tps: 3,000  mfu: 41.2%{reset}\n")


def _titan_eval(step: int, loss: float, gn: float, lr: float) -> str:
    """torchtitan's line, and a validation line every 50 steps (no block is made only of hot lines)."""
    extra = (f"[rank0]:[titan] 2025-01-01 10:00:00,000 - root - INFO - validation step {step}: "
             f"loss {loss + 0.1:.4f}\n") if step % 50 == 0 else ""
    return _titan(step, loss, gn, lr) + extra


def _megatron(step: int, loss: float, gn: float, lr: float) -> str:
    return (f" iteration {step:8d}/ 1000000 | consumed samples: {step * 256:12d} | elapsed time per iteration "
            f"(ms): 1012.3 | learning rate: {lr:.6E} | global batch size:   256 | lm loss: {loss:.6E} | "
            f"loss scale: 1.0 | grad norm: {gn:.3f} | number of skipped iterations:   0 | "
            f"number of nan iterations:   0 |\n")


def _hf(step: int, loss: float, gn: float, lr: float) -> str:
    """HF Trainer's printed dicts with a step (numbers printed by repr, of every width)."""
    return f"{{'loss': {round(loss, 4)}, 'grad_norm': {gn}, 'learning_rate': {lr}, 'step': {step}}}\n"


SHAPES = {"torchtitan": _titan, "torchtitan+eval": _titan_eval, "megatron": _megatron, "hf-dict": _hf}
"""Line shapes of the console log: the goal's (torchtitan, in colour) and others for comparison."""


def write_logs(folder: Path, lines: int, shape: str = "torchtitan") -> tuple[Path, Path]:
    """The console log and the CSV of the same points."""
    rng = random.Random(0)
    text, csv = folder / f"{shape}.log", folder / "same.csv"
    line = SHAPES[shape]
    with open(text, "w") as t, open(csv, "w") as c:
        c.write("step,loss,grad_norm,lr\n")
        for step in range(1, lines + 1):
            loss = 2.5 + 8 * math.exp(-step / 50_000) + rng.gauss(0, 0.02)
            gn = 1.0 + abs(rng.gauss(0, 0.1))
            lr = 3e-4 * min(1.0, step / 2000)
            t.write(line(step, loss, gn, lr))
            c.write(f"{step},{loss:.4f},{gn:.4f},{lr:.4e}\n")
    return text, csv


def write_prose(folder: Path, megabytes: int) -> Path:
    """A text of sentences with numbers in them, no training log."""
    rng = random.Random(1)
    words = ["the", "model", "was", "trained", "on", "data", "from", "year", "and", "page", "chapter", "figure"]
    path = folder / "prose.txt"
    with open(path, "w") as f:
        size = 0
        while size < megabytes * 2**20:
            line = " ".join(rng.choice(words) + (f" {rng.randint(1, 2020)}" if rng.random() < 0.3 else "")
                            for _ in range(14)) + ".\n"
            f.write(line)
            size += len(line)
    return path


def analyze_once(path: Path, *options: str) -> tuple[float, float, float]:
    """One ``python -m lossguard analyze --json [OPTIONS] PATH`` (whole process): wall seconds, CPU
    seconds (user + system, of that process only) and its peak resident memory in MiB."""
    with tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "lossguard", "analyze", "--json", *options, str(path)],
                                 stdout=subprocess.DEVNULL, stderr=err, env=dict(os.environ))
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode not in (0, 1):
            err.seek(0)
            raise SystemExit(f"analyze {path} failed: {err.read().decode()[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    """Run the measurements and print them with their ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--prose-mb", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3, help="pairs of runs (CSV, then text)")
    ap.add_argument("--shapes", default="torchtitan", help=f"comma-separated, of: {', '.join(SHAPES)}")
    ap.add_argument("--grammar", action="store_true",
                    help="read the console logs with --format text (Megatron and HF dicts have readers of their own)")
    args = ap.parse_args()
    from lossguard.io import detect_format

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for shape in args.shapes.split(","):
            text, csv = write_logs(folder, args.lines, shape)
            fmt = "text" if args.grammar else detect_format(text)
            print(f"{shape} console log (read as {fmt!r}): {args.lines:,} lines, "
                  f"{text.stat().st_size / 2**20:.0f} MB; "
                  f"same data as CSV: {csv.stat().st_size / 2**20:.0f} MB")
            for k in range(args.repeat):  # CSV then text, back to back: the machine's load is near the same
                c_wall, c_cpu, c_mem = analyze_once(csv)
                t_wall, t_cpu, t_mem = analyze_once(text, *(["--format", "text"] if args.grammar else []))
                print(f"  pair {k + 1}: CSV {c_wall:.2f} s (cpu {c_cpu:.2f} s, {c_mem:.0f} MiB), "
                      f"text {t_wall:.2f} s (cpu {t_cpu:.2f} s, {t_mem:.0f} MiB): ratio {t_wall / c_wall:.2f}x "
                      f"(cpu {t_cpu / c_cpu:.2f}x), load average {os.getloadavg()[0]:.1f} (goal <= 3x)")
            text.unlink()
        csv.unlink()
        prose = write_prose(folder, args.prose_mb)
        best = math.inf
        for _ in range(3):
            t = time.perf_counter()
            fmt = detect_format(prose)
            best = min(best, time.perf_counter() - t)
        print(f"recognise a {prose.stat().st_size / 2**20:.0f} MB text that is no log: {best:.3f} s -> {fmt!r} "
              f"(goal < 1 s)")


if __name__ == "__main__":
    main()
