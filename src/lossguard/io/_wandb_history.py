"""Read the history of a W&B run from its ``run-<id>.wandb`` transaction log, with the SDK's reader.

What a user has on disk after ``wandb.init(mode="offline")`` (or before ``wandb sync``) is
``wandb/offline-run-<date>-<id>/run-<id>.wandb``: a binary log of protobuf records. Its layout is
the SDK's own business and changes between versions, so it is not decoded here: the SDK's
supported reader, ``wandb leet inspect --json <file>`` (wandb >= 0.31, part of the ``wandb``
package, run as ``python -m wandb``), prints one JSON object per record and this module keeps the
``history`` records. Non-finite values arrive as the strings ``"NaN"``, ``"Infinity"`` and
``"-Infinity"``; media and histograms (keys beside a ``<name>._type`` key) and text are skipped.

Steps: HF's ``WandbCallback`` logs ``train/global_step`` with every call and W&B's ``_step`` only
counts calls (eval results and the final summary are calls of their own), so ``train/global_step``
is the step where a record has it, else ``_step``. Keys W&B and frameworks keep for bookkeeping
(:func:`lossguard.metrics.is_bookkeeping`) are not metrics.

Each file is one segment (a resumed run writes a new ``offline-run-*`` directory and file, with the
same run id), dated by its first ``_timestamp``; the run id goes in ``metadata["run_id"]`` so that
:func:`lossguard.io.read_log` can tell runs apart.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import LogFormatError, MissingDependencyError
from ..metrics import canonical_name, is_bookkeeping
from ..runlog import RunLog, RunLogBuilder

MAGIC = b":W&B"
"""The first bytes of every ``.wandb`` transaction log."""

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_STEP_KEYS = ("train/global_step", "_step")


class EmptyRunError(LogFormatError):
    """A ``.wandb`` file with no history record: the run was killed before the SDK wrote any.
    :func:`lossguard.io.read_log` skips such a file inside a directory, with a warning."""


def _records(path: Path):
    """Yield the JSON records ``wandb leet inspect --json`` prints for ``path``, as they come."""
    if importlib.util.find_spec("wandb") is None:  # not imported here: the SDK's import is slow
        raise MissingDependencyError("wandb", "wandb", "reading a W&B run-*.wandb file")
    cmd = [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(Path(path).resolve())]
    # The CLI writes its debug log into ./wandb (or $WANDB_DIR) when one exists: run it in a
    # scratch directory so that reading never adds a file to the user's run directory. Offline mode
    # and no error reporting: reading a local file must not talk to a server.
    env = {**os.environ, "WANDB_DIR": "", "WANDB_SILENT": "true", "WANDB_MODE": "offline",
           "WANDB_ERROR_REPORTING": "false"}
    with tempfile.TemporaryDirectory(prefix="lossguard-wandb-") as scratch:
        env["WANDB_DIR"] = scratch
        # stderr goes to a file: a pipe nobody reads while stdout streams could fill and stall the SDK
        with open(os.path.join(scratch, "stderr.txt"), "w+", encoding="utf-8", errors="replace") as errf, \
                subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, stdin=subprocess.DEVNULL, cwd=scratch,
                                 env=env, text=True, encoding="utf-8", errors="replace") as proc:
            for line in proc.stdout or ():  # stdout=PIPE: never None
                if line.startswith("{"):
                    try:
                        yield json.loads(line)
                    except ValueError:
                        continue
            code = proc.wait()
            errf.seek(0)
            err = errf.read()
    if code != 0 and ("No such command" in err or ("leet" in err and "Usage" in err)):
        raise MissingDependencyError("wandb>=0.31", "wandb", "reading a W&B run-*.wandb file "
                                     "(its reader, `wandb leet inspect --json`, came with wandb 0.31)")
    if code != 0:
        raise LogFormatError(f"the W&B SDK cannot read this file: {err.strip()[-300:] or f'exit code {code}'}",
                             path=path, fix="check that it is a run-*.wandb file written by wandb; "
                                            "`wandb leet inspect` shows what the SDK sees")


def _value(raw) -> float | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, (int, float)):
        return float(raw)
    if isinstance(raw, str):
        return _NON_FINITE.get(raw)
    return None


def read(path: Path) -> RunLog:
    """Read one ``run-<id>.wandb`` file as an unstitched RunLog of one segment.

    Raises:
        MissingDependencyError: ``wandb`` is not installed (extra ``wandb``).
        LogFormatError: the SDK cannot read the file, or it holds no history record.
    """
    path = Path(path)
    columns: dict[str, tuple[list[int], list[float]]] = {}
    run_facts: dict = {}
    first_time = None
    finished = False
    exit_code = 0
    last_step = None
    behind = 0
    for rec in _records(path):
        kind = rec.get("type")
        if kind == "run":
            run = rec.get("run", {})
            run_facts = {k: run[k] for k in ("run_id", "project", "entity", "display_name") if run.get(k)}
        elif kind == "exit":
            finished = True
            exit_code = rec.get("exit", {}).get("exit_code", 0)
        elif kind == "history":
            item = rec.get("history", {}).get("item", {})
            step = next((item[k] for k in _STEP_KEYS if isinstance(item.get(k), (int, float))), None)
            if step is None:
                continue
            step = int(step)
            if first_time is None and isinstance(item.get("_timestamp"), (int, float)):
                first_time = float(item["_timestamp"])
            media = {k[:-len("._type")] for k in item if k.endswith("._type")}
            for key, raw in item.items():
                if is_bookkeeping(key) or key.split(".", 1)[0] in media:
                    continue
                value = _value(raw)
                if value is None:
                    continue
                steps, values = columns.setdefault(key, ([], []))
                if steps and steps[-1] == step:
                    values[-1] = value  # logged again before the step advanced: the last value counts
                elif steps and step < steps[-1]:
                    behind += 1  # W&B itself drops a step below the run's current one
                else:
                    steps.append(step)
                    values.append(value)
            last_step = step
    if not columns:
        raise EmptyRunError("the W&B run holds no numeric history record", path=path,
                             fix="the run logged nothing yet (wandb.log was never called), or logged only media")
    builder = RunLogBuilder("wandb", unit="record")
    ending = (" (no exit record: killed or still running)" if not finished
              else f" (exit code {exit_code})" if exit_code else "")
    note = f"W&B run {run_facts.get('run_id', '?')}" + ending
    segment = builder.start_segment(str(path), start_time=first_time, note=note)
    taken: dict[str, str] = {}
    for key in columns:
        name = canonical_name(key)
        taken[key] = name if name not in taken.values() else key
    for key, (steps, values) in columns.items():
        builder.add(taken[key], steps, values, segment=segment)
    builder.metadata.update(run_facts)
    if behind:
        builder.metadata.setdefault("warnings", []).append(
            f"{path}: {behind} points logged at a step below an earlier one were left out, as W&B does")
    if not finished:
        builder.metadata.setdefault("warnings", []).append(
            f"{path}: the W&B run has no exit record (it was killed, or is still running); read up to step {last_step}")
    elif exit_code:
        builder.metadata.setdefault("warnings", []).append(
            f"{path}: the W&B run exited with code {exit_code} (it crashed) after step {last_step}")
    return builder.build()
