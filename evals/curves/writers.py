"""Write a generated run the way real loggers do: CSV, JSON lines, HF ``trainer_state.json``, Megatron text.

Each writer uses the conventions of the tool it imitates (column and key names, number formats,
how a relaunch shows), so reading the file back exercises lossguard's real reader for that format.
A writer never overwrites a file: it raises ``FileExistsError``.
"""
from __future__ import annotations

import json
import math
from enum import Enum
from pathlib import Path

import numpy as np

from evals.curves.truth import CurveRun


class LogFormat(str, Enum):
    """The file formats a run can be written in."""

    CSV = "csv"
    """One row per logged step; a ``segment`` column labels the launch."""
    JSONL = "jsonl"
    """One JSON object per logged step; a relaunch is an ``{"event": "resume"}`` record."""
    HF_TRAINER_STATE = "hf_trainer_state"
    """HF Trainer's ``trainer_state.json`` (single-launch runs only: it cannot hold a relaunch)."""
    MEGATRON = "megatron"
    """Megatron-LM stdout: ``iteration N/ M | ... | lm loss: ... |`` lines; a relaunch prints a banner."""


SUFFIX = {LogFormat.CSV: "csv", LogFormat.JSONL: "jsonl", LogFormat.HF_TRAINER_STATE: "json",
          LogFormat.MEGATRON: "log"}


def formats_for(run: CurveRun) -> list[LogFormat]:
    """The formats that can hold ``run`` (HF's trainer_state cannot hold a relaunch)."""
    if int(run.segment.max()) > 0:
        return [LogFormat.CSV, LogFormat.JSONL, LogFormat.MEGATRON]
    return list(LogFormat)


def _num(v: float) -> float | None:
    return float(v)


def _records(run: CurveRun, *, lr_key: str = "lr") -> list[dict]:
    recs = []
    for i in range(len(run.steps)):
        rec = {"step": int(run.steps[i])}
        for name, vals in run.metrics.items():
            rec[lr_key if name == "lr" else name] = _num(vals[i])
        recs.append(rec)
    return recs


def _csv(run: CurveRun) -> str:
    names = list(run.metrics)
    multi = int(run.segment.max()) > 0
    head = ["step", *(["segment"] if multi else []), *names]
    lines = [",".join(head)]
    for i in range(len(run.steps)):
        cells = [str(int(run.steps[i]))] + ([str(int(run.segment[i]))] if multi else [])
        cells += [repr(float(run.metrics[n][i])) for n in names]
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n"


def _jsonl(run: CurveRun) -> str:
    out = []
    for i, rec in enumerate(_records(run)):
        if i and run.segment[i] != run.segment[i - 1]:
            out.append(json.dumps({"event": "resume", "step": rec["step"]}))
        out.append(json.dumps(rec))  # Python's json writes NaN/Infinity, as training scripts do
    return "\n".join(out) + "\n"


def _hf(run: CurveRun) -> str:
    if int(run.segment.max()) > 0:
        raise ValueError("trainer_state.json cannot hold a relaunch; use formats_for(run)")
    history = []
    total = int(run.steps[-1])
    for rec in _records(run, lr_key="learning_rate"):
        rec["epoch"] = round(rec["step"] / max(total, 1), 6)
        history.append(rec)
    state = {"best_metric": None, "epoch": 1.0, "global_step": total, "log_history": history,
             "logging_steps": run.log_every, "max_steps": total}
    return json.dumps(state, indent=2, sort_keys=True)


def _meg_value(v: float) -> str:
    return "nan" if math.isnan(v) else ("inf" if math.isinf(v) else f"{v:.6E}")


def _megatron(run: CurveRun) -> str:
    total = int(run.steps.max())
    lines = ["using world size: 64, data-parallel size: 8, tensor-model-parallel size: 8", "training ..."]
    streams = [n for n in run.metrics if n.startswith("loss/")]
    for i in range(len(run.steps)):
        if i and run.segment[i] != run.segment[i - 1]:
            lines += ["using world size: 64, data-parallel size: 8, tensor-model-parallel size: 8", "training ..."]
        m = {k: float(v[i]) for k, v in run.metrics.items()}
        parts = [f" iteration {int(run.steps[i]):8d}/{total:8d}", f" consumed samples: {int(run.steps[i]) * 512:12d}",
                 " elapsed time per iteration (ms): 312.4", f" learning rate: {m['lr']:.6E}",
                 " global batch size:   512"]
        if "loss" in m:
            parts.append(f" lm loss: {_meg_value(m['loss'])}")
        parts += [f" lm loss {s.split('/', 1)[1]}: {_meg_value(m[s])}" for s in streams]
        if "loss_scale" in m:
            parts.append(f" loss scale: {m['loss_scale']:.1f}")
        parts.append(f" grad norm: {m['grad_norm']:.3f}" if np.isfinite(m["grad_norm"]) else " grad norm: nan")
        nan = int(not all(np.isfinite(m[k]) for k in m if k.startswith("loss")))
        parts += [" number of skipped iterations:   0", f" number of nan iterations: {nan:3d}", ""]
        lines.append("|".join(parts))
    return "\n".join(lines) + "\n"


_WRITERS = {LogFormat.CSV: _csv, LogFormat.JSONL: _jsonl, LogFormat.HF_TRAINER_STATE: _hf,
            LogFormat.MEGATRON: _megatron}


def write_log(run: CurveRun, fmt: LogFormat | str, directory: str | Path, *, name: str | None = None) -> Path:
    """Write ``run`` in format ``fmt`` into ``directory``; return the file's path.

    Args:
        run: the generated run.
        fmt: the format (see :func:`formats_for` for what a run allows).
        directory: an existing directory.
        name: file stem; defaults to ``<family>-<seed>``. HF's file is always ``trainer_state.json``
            inside a directory of that stem, as the Trainer writes it.

    Raises:
        FileExistsError: the file is already there (nothing is ever overwritten).
        ValueError: the format cannot hold this run.
    """
    fmt = LogFormat(fmt)
    stem = name or f"{run.family}-{run.seed}"
    directory = Path(directory)
    if fmt is LogFormat.HF_TRAINER_STATE:
        (directory / stem).mkdir(exist_ok=True)
        path = directory / stem / "trainer_state.json"
    else:
        path = directory / f"{stem}.{SUFFIX[fmt]}"
    text = _WRITERS[fmt](run)
    with open(path, "x", encoding="utf-8") as fh:  # "x": refuse to overwrite
        fh.write(text)
    return path
