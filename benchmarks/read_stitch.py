"""Memory and time :func:`lossguard.stitch.stitch` adds on top of the arrays a reader returned.

A ``--rows`` row CSV (default 3.5M; ``step,loss,lr,grad_norm,epoch``) is read unstitched with the CSV
reader; then ``stitch`` runs under :mod:`tracemalloc` (numpy reports its buffers to it), and the
peak of memory allocated during the call, above what was allocated before it, is printed with
the arrays' own size. ``--resumes K`` writes the run as K+1 launches, each rolling back 1,000
steps, so the rollback path is measured too.

    .venv/bin/python benchmarks/read_stitch.py                 # 3.5M rows, one launch
    .venv/bin/python benchmarks/read_stitch.py --resumes 3     # with rollbacks
    .venv/bin/python benchmarks/read_stitch.py --stitch-from f80dce4   # an older stitch.py, same data
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np


def write_csv(path: Path, rows: int, resumes: int) -> None:
    """A CSV of ``rows`` rows; with ``resumes``, a ``segment`` column numbers the launches, each restarting 1,000 steps back."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    steps = np.arange(1, rows + 1, dtype=np.int64)
    segment = np.zeros(rows, dtype=np.int64)
    for k in range(1, resumes + 1):
        cut = rows * k // (resumes + 1)
        steps[cut:] -= 1000
        segment[cut:] = k
    rng = np.random.default_rng(0)
    columns = {"segment": segment} if resumes else {}
    table = pa.table({**columns, "step": steps, "loss": 3.0 + rng.standard_normal(rows) * 0.1,
                      "lr": np.full(rows, 1e-4), "grad_norm": rng.random(rows),
                      "epoch": steps / 1e5})
    pacsv.write_csv(table, str(path))


def load_stitch(commit: str | None):
    """The ``stitch`` function of this tree, or of ``stitch.py`` at ``commit``."""
    if commit is None:
        from lossguard.stitch import stitch
        return stitch
    source = subprocess.run(["git", "show", f"{commit}:src/lossguard/stitch.py"], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).resolve().parent.parent).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source.replace("from .", "from lossguard."))
    spec = importlib.util.spec_from_file_location("old_stitch", f.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.stitch


def main(argv: list[str] | None = None) -> int:
    """Write the CSV, read it, stitch it under tracemalloc, print one Markdown row."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=3_500_000, help="CSV rows")
    ap.add_argument("--resumes", type=int, default=0, help="launches after the first, each a 1,000-step rollback")
    ap.add_argument("--stitch-from", default=None, metavar="COMMIT", help="measure stitch.py as of this commit")
    args = ap.parse_args(argv)
    from lossguard.io import csv as csv_reader

    stitch = load_stitch(args.stitch_from)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.csv"
        write_csv(path, args.rows, args.resumes)
        log = csv_reader.read(path)
    arrays = sum(s.steps.nbytes + s.values.nbytes + s.segment.nbytes + s.alive.nbytes for s in log.series.values())
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    t = time.perf_counter()
    out = stitch(log)
    seconds = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    print(f"| {args.stitch_from or 'this tree'} | {args.rows:,} | {len(out.segments)} | {arrays / 1e6:.0f} "
          f"| {peak / 1e6:.1f} | {seconds:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
