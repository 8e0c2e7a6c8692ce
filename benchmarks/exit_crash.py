"""Count the torchrun jobs that abort at exit ("terminate called without an active exception").

Runs one job ``--runs`` times in a row under ``torchrun --standalone --nproc-per-node 2`` (each
job waits for the previous one) and counts the jobs whose output has that line or that did not
exit 0. Jobs:

- ``minimal``: ``benchmarks/exit_crash_job.py`` (init_distributed + ResumableSampler, no
  ``destroy_process_group`` of its own: the shape of the job that aborted outside);
- ``fsdp``: the FSDP2 job of ``tests/test_restart_torchrun.py`` (36 steps, async saves every 4);
- ``guarded``: the guarded FSDP2 job of ``tests/test_rollback_crash_torchrun.py`` (60 steps, a
  bad-data pocket rolled back, no kill).

``--src`` picks the lossguard source tree (e.g. an export of an older commit, to count before a
fix). The stdout and stderr of every job that aborted or exited non-zero are kept, one file per
job, in ``--keep`` (a fresh directory under the system temp dir by default, printed at the end),
so a failure can be told apart from the abort it is counted as. Usage::

    nice -n 10 python benchmarks/exit_crash.py --job minimal --runs 50
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def job_cmd(job: str, tmp: Path) -> list[str]:
    run = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    if job == "minimal":
        return run + [str(HERE / "exit_crash_job.py")]
    if job == "guarded":  # the rollback job of tests/test_rollback_crash_torchrun.py, without a kill
        return run + ["-m", "evals.fsdp_guarded_loop", "--ckpt-dir", str(tmp / "ck"), "--out", str(tmp / "res")]
    return run + ["-m", "evals.fsdp_train_loop", "--steps", "36", "--save-every", "4", "--async-saves",
                  "--layers", "1", "--ckpt-dir", str(tmp / "ck"), "--jsonl", str(tmp / "run.jsonl")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", choices=("minimal", "fsdp", "guarded"), default="minimal")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--src", default=str(HERE.parent / "src"), help="lossguard source tree to put on PYTHONPATH")
    ap.add_argument("--keep", default=None, help="directory for the output of failing jobs (default: a new temp dir)")
    a = ap.parse_args()
    keep = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix=f"exit-crash-{a.job}-"))
    keep.mkdir(parents=True, exist_ok=True)
    # the source tree, and the repo root for the evaluation lab's evals.fsdp_train_loop
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([a.src, str(HERE.parent)]))
    aborts, failures, t0 = 0, 0, time.time()
    for k in range(a.runs):
        with tempfile.TemporaryDirectory() as tmp:
            p = subprocess.run(job_cmd(a.job, Path(tmp)), env=env, capture_output=True, text=True, timeout=300)
        aborted = "terminate called" in p.stdout + p.stderr
        aborts += aborted
        failures += p.returncode != 0
        kept = ""
        if aborted or p.returncode != 0:
            log = keep / f"job-{k + 1:03d}.log"
            log.write_text(f"rc={p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
            kept = f" (output in {log})"
        print(f"job {k + 1}: rc={p.returncode}{' ABORT' if aborted else ''}{kept}", flush=True)
    print(f"{a.job} job, src={a.src}: {aborts} of {a.runs} jobs aborted at exit, {failures} exited non-zero "
          f"({time.time() - t0:.0f} s); failing jobs' output kept in {keep}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
