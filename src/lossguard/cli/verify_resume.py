"""``lossguard verify-resume [options] -- COMMAND...``: is the script's resume exact?

Runs COMMAND straight through, then stopped at step k and resumed, and compares the per-step batch
ids and losses. Exit 0 when the resume is exact, 1 when it is not, 2 on a usage or protocol error.
The protocol the script follows is in :mod:`lossguard.checkpoint.verify` and ``docs/resume.md``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from ..errors import ConfigError


def register(subparsers) -> None:
    """Add the ``verify-resume`` verb."""
    p = subparsers.add_parser(
        "verify-resume", help="run a training script straight and with a forced resume; compare data and losses",
        usage="lossguard verify-resume [options] -- COMMAND...",
        description="Is the script's resume exact? Runs COMMAND straight through, then stopped after "
        "step K and resumed, and compares per-step batch ids and losses (exit 0 exact, 1 not, 2 error). "
        "The script reads LOSSGUARD_LOG, LOSSGUARD_CKPT_DIR, LOSSGUARD_STOP_AT (and optionally "
        "LOSSGUARD_RESUME) from its environment; see docs/resume.md.")
    p.add_argument("--stop-at", type=int, default=None, metavar="K",
                   help="force the resume after step K (default: half of the straight run)")
    p.add_argument("--rtol", type=float, default=0.0, help="relative loss tolerance (default 0: bitwise)")
    p.add_argument("--atol", type=float, default=0.0, help="absolute loss tolerance (default 0)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds allowed per script run")
    p.add_argument("--workdir", type=Path, default=None,
                   help="keep logs and checkpoints here (default: a temp dir, removed)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the training command")
    p.set_defaults(handler=run)


def _describe(d) -> list[str]:
    lines = [f"resumed run: stopped after step {d.stop_at}, resumed at step {d.resumed_at}"]
    if not d.resumed:
        lines.append(f"  RESUME NOT DETECTED: the second half started at step {d.resumed_at}, expected "
                     f"{d.stop_at + 1} (does the script load its checkpoint from LOSSGUARD_CKPT_DIR?)")
    if d.missing_steps:
        lines.append(f"  missing steps: {len(d.missing_steps)} (first {d.missing_steps[:5]})")
    if d.extra_steps:
        lines.append(f"  extra steps: {len(d.extra_steps)} (first {d.extra_steps[:5]})")
    if not d.has_ids:
        lines.append("  data: not compared (the log has no batch_ids)")
    elif d.first_batch_diff is None:
        lines.append("  data: OK, every step saw the same sample ids in the same order")
    else:
        step, a, b = d.first_batch_diff
        lines.append(f"  data: DIFFERS from step {step}: straight {a[:8]}{'...' if len(a) > 8 else ''}, "
                     f"resumed {b[:8]}{'...' if len(b) > 8 else ''}")
        if d.n_repeated:
            s, i, first = d.repeated[0]
            lines.append(f"    repeated data: {d.n_repeated} sample sightings more than the straight run; "
                         f"first: sample {i} at step {s}, already seen at step {first}")
        if d.n_missing_ids:
            lines.append(f"    missing data: {d.n_missing_ids} sample sightings of the straight run never seen")
        if d.reordered:
            lines.append("    reordered data: the same samples, at different steps")
    if d.first_loss_diff is None:
        lines.append("  loss: OK, every step's loss matches" + (" bitwise" if d.has_ids else ""))
    else:
        step, a, b = d.first_loss_diff
        lines.append(f"  loss: first difference at step {step}: straight {a!r}, resumed {b!r} (diff {b - a:.3e})")
    lines.append("RESULT: resume is exact" if d.ok else "RESULT: resume is NOT exact")
    return lines


def run(args) -> int:
    """Handler of ``verify-resume``."""
    from ..checkpoint.verify import verify_resume

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ConfigError("no training command given", fix="lossguard verify-resume -- python train.py ...")
    if args.stop_at is not None and args.stop_at < 1:
        raise ConfigError(f"--stop-at must be >= 1, got {args.stop_at}", fix="pass a step inside the run")
    keep = args.workdir is not None
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="lossguard-verify-"))
    try:
        diff = verify_resume(command, workdir=workdir, stop_at=args.stop_at, rtol=args.rtol, atol=args.atol,
                             timeout=args.timeout)
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps({**asdict(diff), "resumed": diff.resumed, "ok": diff.ok}, indent=1))
    else:
        print("\n".join(_describe(diff)))
        if keep:
            print(f"logs and checkpoints kept in {workdir}", file=sys.stderr)
    return 0 if diff.ok else 1
