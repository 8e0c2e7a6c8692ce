"""verify-resume: run a training script straight and with a forced resume, compare data and losses.

Protocol the script follows (``docs/resume.md``), all through environment variables:

- ``LOSSGUARD_LOG``: append one JSONL record per optimizer step, ``{"step": s, "loss": x,
  "batch_ids": [sample ids of the step's batch]}`` (``sample_ids`` is accepted too). Steps count
  from 1; the record of step s is written after the s-th update.
- ``LOSSGUARD_CKPT_DIR``: the checkpoint directory to save to and to resume from (empty at first).
- ``LOSSGUARD_STOP_AT=k``: after step k, save a checkpoint and exit 0.
- ``LOSSGUARD_RESUME=1``: set on the second half of the resumed run; a script that resumes only on
  a flag can use it (``sh -c 'python train.py ${LOSSGUARD_RESUME:+--resume}'``); a script that
  resumes whenever the directory holds a checkpoint can ignore it.

Three invocations of the same command: (A) straight through; (B1) with ``LOSSGUARD_STOP_AT=k``;
(B2) again on B1's checkpoint directory. B1 + B2 must reproduce A step by step.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LogFormatError, LossguardError

IDS_KEYS = ("batch_ids", "sample_ids")


def read_steps(path: Path) -> dict[int, tuple[float, list[int] | None]]:
    """Step records of a protocol log: ``step -> (loss, batch ids or None)``; the last record of a
    step wins (a resumed run may log a step again). Event records are ignored."""
    out: dict[int, tuple[float, list[int] | None]] = {}
    if not path.exists():
        return out
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise LogFormatError(f"not JSON ({exc.msg})", path=path, where=f"line {n}",
                                     fix="write one JSON object per line") from exc
            if not isinstance(rec, dict) or "event" in rec or "loss" not in rec:
                continue
            if not isinstance(rec.get("step"), int):
                raise LogFormatError(f"'step' must be an int, got {rec.get('step')!r}", path=path,
                                     where=f"line {n}", fix="log the optimizer step as an integer")
            ids = next((rec[k] for k in IDS_KEYS if k in rec), None)
            loss = rec["loss"]
            out[rec["step"]] = (float("nan") if loss is None else float(loss), ids)
    return out


@dataclass
class ResumeDiff:
    """How a resumed run differs from the straight one.

    Attributes:
        stop_at: the step the first half stopped (and saved) at.
        resumed_at: first step the second half logged (stop_at + 1 when the resume worked).
        missing_steps: steps the straight run logged and the resumed one did not.
        extra_steps: steps only the resumed run logged.
        repeated: ``(step, sample id, step it was already seen at)`` for samples the resumed run saw
            more often than the straight run (first 20).
        n_repeated: how many such extra sightings in all.
        n_missing_ids: how many sightings the straight run had that the resumed run lacks.
        reordered: same samples overall, but not at the same steps.
        first_batch_diff: ``(step, straight ids, resumed ids)`` of the first differing batch.
        first_loss_diff: ``(step, straight loss, resumed loss)`` of the first loss outside tolerance.
        has_ids: whether the logs carried batch ids (otherwise only losses were compared).
    """

    stop_at: int
    resumed_at: int | None
    missing_steps: list[int] = field(default_factory=list)
    extra_steps: list[int] = field(default_factory=list)
    repeated: list[tuple[int, int, int]] = field(default_factory=list)
    n_repeated: int = 0
    n_missing_ids: int = 0
    reordered: bool = False
    first_batch_diff: tuple[int, list, list] | None = None
    first_loss_diff: tuple[int, float, float] | None = None
    has_ids: bool = True

    @property
    def resumed(self) -> bool:
        """The second half started right after the stop step (it really resumed)."""
        return self.resumed_at == self.stop_at + 1

    @property
    def ok(self) -> bool:
        """The resume is exact within the tolerance."""
        return (self.resumed and not self.missing_steps and not self.extra_steps and self.first_batch_diff is None
                and self.first_loss_diff is None)


def compare(straight: dict, first: dict, second: dict, *, stop_at: int, rtol: float = 0.0,
            atol: float = 0.0) -> ResumeDiff:
    """Compare the straight run's step records with the two halves of the resumed run."""
    resumed = {**first, **second}
    diff = ResumeDiff(stop_at=stop_at, resumed_at=min(second) if second else None)
    diff.missing_steps = sorted(set(straight) - set(resumed))
    diff.extra_steps = sorted(set(resumed) - set(straight))
    steps = sorted(set(straight) & set(resumed))
    diff.has_ids = all(straight[s][1] is not None and resumed[s][1] is not None for s in steps)
    for s in steps:
        (la, ia), (lb, ib) = straight[s], resumed[s]
        if diff.has_ids and diff.first_batch_diff is None and list(ia) != list(ib):
            diff.first_batch_diff = (s, list(ia), list(ib))
        same = (math.isnan(la) and math.isnan(lb)) or abs(la - lb) <= atol + rtol * abs(la)
        if diff.first_loss_diff is None and not same:
            diff.first_loss_diff = (s, la, lb)
    if diff.has_ids:
        want = Counter(i for s in sorted(straight) if straight[s][1] for i in straight[s][1])
        seen: Counter = Counter()
        where: dict[int, int] = {}
        for s in sorted(resumed):
            for i in resumed[s][1] or []:
                if seen[i] >= want[i]:
                    diff.n_repeated += 1
                    if len(diff.repeated) < 20:
                        diff.repeated.append((s, i, where.get(i, s)))
                seen[i] += 1
                where.setdefault(i, s)
        diff.n_missing_ids = sum((want - seen).values())
        diff.reordered = diff.first_batch_diff is not None and diff.n_repeated == 0 and diff.n_missing_ids == 0
    return diff


def _invoke(cmd: list[str], env: dict[str, str], label: str, timeout: float) -> None:
    try:
        done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              timeout=timeout)
    except FileNotFoundError as exc:
        raise LossguardError(f"cannot run {cmd[0]!r}: not found",
                             fix="give the full training command after --") from exc
    except subprocess.TimeoutExpired as exc:
        raise LossguardError(f"the {label} run did not finish within {timeout:g} s",
                             fix="raise --timeout or make the script's run shorter") from exc
    if done.returncode != 0:
        tail = "\n    ".join((done.stderr or "").strip().splitlines()[-8:])
        raise LossguardError(f"the {label} run exited with code {done.returncode}:\n    {tail}",
                             fix="make the script run on its own first (see docs/resume.md for the protocol)")


def verify_resume(cmd: list[str], *, workdir: Path, stop_at: int | None = None, rtol: float = 0.0,
                  atol: float = 0.0, timeout: float = 3600.0) -> ResumeDiff:
    """Run the protocol in ``workdir`` and compare; ``stop_at`` None = half of the straight run."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("LOSSGUARD_")}
    workdir.mkdir(parents=True, exist_ok=True)

    def env(name: str, **extra: str) -> dict[str, str]:
        return {**base, "LOSSGUARD_LOG": str(workdir / f"{name}.jsonl"),
                "LOSSGUARD_CKPT_DIR": str(workdir / f"{name.split('-')[0]}-ckpt"), **extra}

    _invoke(cmd, env("straight"), "straight", timeout)
    straight = read_steps(workdir / "straight.jsonl")
    if not straight:
        raise LossguardError("the straight run logged no step records", path=workdir / "straight.jsonl",
                             fix="write {\"step\", \"loss\", \"batch_ids\"} per step to $LOSSGUARD_LOG")
    if stop_at is None:
        stop_at = max(1, max(straight) // 2)
    _invoke(cmd, env("resumed-1", LOSSGUARD_STOP_AT=str(stop_at)), f"first half (stop at {stop_at})", timeout)
    first = read_steps(workdir / "resumed-1.jsonl")
    if not first or max(first) != stop_at:
        raise LossguardError(f"with LOSSGUARD_STOP_AT={stop_at} the script's last step was "
                             f"{max(first) if first else 'none'}", path=workdir / "resumed-1.jsonl",
                             fix="stop after step LOSSGUARD_STOP_AT, save a checkpoint, exit 0")
    _invoke(cmd, env("resumed-2", LOSSGUARD_RESUME="1"), "second half (resume)", timeout)
    return compare(straight, first, read_steps(workdir / "resumed-2.jsonl"), stop_at=stop_at, rtol=rtol, atol=atol)
