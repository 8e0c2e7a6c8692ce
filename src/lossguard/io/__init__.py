"""Readers for every common training-log format, and :func:`read_log`, which picks one by content.

Each reader is a module ``lossguard.io.<name>`` with ``NAME``, ``sniff(path, head) -> bool`` (``head``
is the file's first 64 KiB) and ``read(path, *, root=None) -> RunLog`` (unstitched). :func:`read_log`
asks the readers in :data:`READERS` order, so specific formats win over the generic CSV/JSONL ones.
Which files of a directory are read, and when its parts are one run, is :mod:`lossguard.io.runs`.
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Sequence, Union

from ..errors import LogFormatError, LossguardError, UnknownFormatError
from ..runlog import RunLog, merge
from ..stitch import stitch
from . import _stdin
from . import runs as run_files
from ._wandb_history import EmptyRunError

READERS = ("tensorboard", "hf_trainer_state", "pasted", "megatron", "wandb", "lightning", "jsonl", "csv", "text")
"""Reader modules in sniffing priority: the first whose ``sniff`` says yes reads the file. ``text``, the
general grammar for console output, comes last: it reads any text with a repeating loss line that
no specific reader claims."""

GRAMMAR_OPTIONS = ("step_key", "loss_key")
"""Options of the text grammar (:mod:`lossguard.io.text`): which printed counter is the step and
which label the loss. Other readers take ``loss_key`` as the name of the series that is the loss."""

HEAD_BYTES = 64 * 1024
PathArg = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]

_loaded: dict[str, ModuleType | None] = {}


def reader(name: str) -> ModuleType | None:
    """The reader module called ``name``, or None when it is not part of this install."""
    if name not in _loaded:
        try:
            _loaded[name] = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            _loaded[name] = None
    return _loaded[name]


def require_reader(name: str) -> ModuleType:
    """The reader module called ``name``; a clear error when it is not part of this install."""
    mod = reader(name)
    if mod is None:
        raise UnknownFormatError(f"the {name!r} reader is not part of this install",
                                 fix=f"use one of: {', '.join(available_formats())}")
    return mod


def available_formats() -> list[str]:
    """Names of the readers present, in sniffing order."""
    return [n for n in READERS if reader(n) is not None]


def _head(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(HEAD_BYTES)
    except OSError as exc:
        raise LossguardError(f"cannot read the file: {exc.strerror or exc}", path=str(path),
                             fix="check the path and its permissions") from None


def detect_format(path: str | os.PathLike, head: bytes | None = None) -> str | None:
    """The name of the first reader that recognises ``path`` by its content, or None."""
    path = Path(path)
    head = _head(path) if head is None else head
    for name in available_formats():
        try:
            if require_reader(name).sniff(path, head):
                return name
        except Exception:  # noqa: BLE001 - a sniffer must never crash the read; treat as "not mine"
            continue
    return None


def _walk(root: Path) -> list[Path]:
    """Files under ``root`` in sorted order, hidden ones left out, each real file once (W&B's
    ``latest-run`` and ``debug.log`` are symlinks to files also reached directly)."""
    seen: set[Path] = set()
    out = []
    for f in sorted(root.rglob("*")):
        if any(part.startswith(".") for part in f.relative_to(root).parts) or not f.is_file():
            continue
        real = f.resolve()
        if real not in seen:
            seen.add(real)
            out.append(f)
    return out


def _expand(paths: PathArg, only: Sequence[str] = ()) -> list[tuple[Path, Path | None]]:
    """(file, root directory or None) for every path; directories are walked in sorted order."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[tuple[Path, Path | None]] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files = _walk(p)
            if not files:
                raise LossguardError("the directory holds no files", path=str(p),
                                     fix="point lossguard at a run directory that contains log files")
            picked = [f for f in files if run_files.selected(f, p, only)]
            if not picked:
                raise LossguardError(f"no file matches --only {' '.join(only)}", path=str(p),
                                     fix="the globs match file names or paths relative to the directory, "
                                         "e.g. --only 'runs/*' or --only '*.csv'")
            out.extend((f, p) for f in picked)
        elif p.exists():
            _stdin.check_regular(p)  # a FIFO with no writer would block the read forever
            out.append((p, None))
        elif p.is_symlink():
            raise LossguardError("a symbolic link that leads nowhere (it points to itself, loops through other "
                                 "links, or its target is gone)", path=str(p),
                                 fix=f"point lossguard at the real file or directory (`ls -l {p}` shows the link)")
        else:
            raise LossguardError("no such file or directory", path=str(p),
                                 fix="check the path (globs are expanded by your shell, not by lossguard)")
    if not out:
        raise LossguardError("no path given", fix="name at least one log file or run directory")
    return out


def read_log(paths: PathArg, *, format: str | None = None, only: Sequence[str] | str = (),
             logging_steps: int | None = None, step_key: str | None = None, loss_key: str | None = None) -> RunLog:
    """Read one run from one or more files or directories and return its stitched timeline.

    Files given by name must be recognised; files found by walking a directory that no reader
    recognises (checkpoints, configs), and the side files writers put beside their logs
    (``hparams.yaml``, W&B's debug logs), are skipped and listed in ``metadata["skipped"]``.
    The parts must be one run (see :mod:`lossguard.io.runs`): the same points written by two
    writers (HF's TensorBoard events and ``trainer_state.json``) are read from one of them, and
    logs that look like separate runs are an error that names them.

    Args:
        paths: a file, a directory, or several of them: all are read as segments of one run.
        format: force a reader (one of :func:`available_formats`) instead of sniffing.
        only: glob(s) picking files inside directories (matched against the file name and the
            path relative to the directory), e.g. ``"runs/*"``.
        logging_steps: HF Trainer's ``logging_steps``, to number the training dicts of a pasted
            Trainer log (they print no step); other formats carry their steps and ignore it.
        step_key: for text logs read by the grammar, the label of the counter that is the step
            (``"order"``: number the loss lines; ``"epoch*batch"``: combine two counters).
        loss_key: the label (text logs) or series name (other formats) that is the training loss.

    Returns:
        The stitched :class:`~lossguard.runlog.RunLog`.

    Raises:
        LossguardError: unreadable path, unknown format, separate runs, or a reader's
            :class:`LogFormatError`.
    """
    if _stdin.wants_stdin(paths):  # '-': spool stdin to a temp file, read it as a file, name it <stdin>
        return _stdin.read_piped(paths, read_log, format=format, only=only, logging_steps=logging_steps,
                                 step_key=step_key, loss_key=loss_key)
    if logging_steps is not None and (isinstance(logging_steps, bool) or not isinstance(logging_steps, int)
                                      or logging_steps < 1):
        raise LossguardError(f"--logging-steps (logging_steps) must be a positive whole number, got {logging_steps!r}",
                             fix="pass --logging-steps N, the Trainer's TrainingArguments.logging_steps")
    if format is not None and (format not in READERS or reader(format) is None):
        raise UnknownFormatError(f"unknown format {format!r}",
                                 fix=f"use one of: {', '.join(available_formats())}")
    only = [only] if isinstance(only, str) else list(only)
    logs: list[RunLog] = []
    skipped: list[str] = []
    warnings: list[str] = []
    event_roots: set[Path] = set()  # run directories whose event files are read in one call
    expanded = _expand(paths, only)
    for path, root in expanded:
        if root is not None and format is None and run_files.is_side_file(path):
            skipped.append(str(path))
            continue
        head = _head(path)
        name = format or detect_format(path, head)
        if name is None and root is None and (step_key is not None or loss_key is not None) and reader("text"):
            name = "text"  # the user named the columns: read the text with the grammar and those choices
        if name == "tensorboard" and root is not None:
            # One call per run directory: add_scalars writes each stream to a sub-directory, and
            # those files must join the launch they belong to, not look like restarts at step 0.
            if root not in event_roots:
                event_roots.add(root)
                tb = require_reader(name)
                events = [f for f, r in expanded if r == root and tb.is_event_file(f)]
                logs.append(tb.read(root, root=root, files=events if only else None))
            continue
        if name is None:
            if root is not None:
                skipped.append(str(path))
                continue
            if not head.strip():
                raise LogFormatError("the file is empty", path=str(path),
                                     fix="point lossguard at a log that has at least one logged step")
            text = reader("text")
            if text is not None:
                explained = text.explain_unreadable(path)
                if explained is not None:
                    raise explained
            raise UnknownFormatError(
                "no reader recognises this file", path=str(path),
                fix=f"pass --format with one of: {', '.join(available_formats())}; CSV needs a header "
                    "naming a step column, JSONL one JSON object per line")
        extra: dict[str, Any] = {}
        if name == "pasted" and logging_steps is not None:
            extra = {"logging_steps": logging_steps}
        if name == "text" and (step_key is not None or loss_key is not None):
            extra = {"step_key": step_key, "loss_key": loss_key}
        try:
            logs.append(require_reader(name).read(path, root=root, **extra))
        except EmptyRunError as exc:
            if root is None:
                raise
            skipped.append(str(path))  # a launch killed before it logged: nothing to read, not an error
            warnings.append(f"{path}: {exc.what}")
    if not logs and warnings:  # only launches killed before they logged anything
        raise LogFormatError(warnings[0], fix="the run was killed before it logged a step: there is nothing to analyse")
    if not logs:
        explained = run_files.explain_unreadable(skipped)
        if explained is not None:
            raise explained
        raise UnknownFormatError(
            f"none of the {len(skipped)} files is a training log lossguard can read "
            f"(for example {Path(skipped[0]).name})", path=", ".join(sorted({str(r) for _, r in expanded if r})),
            fix=f"formats read: {', '.join(available_formats())}")
    hf = [g for g in logs if g.format == "hf_trainer_state"]
    hf_sources = [src for g in hf for src in g.sources]
    if len(hf) > 1:  # every HF checkpoint repeats the whole history: keep each point once
        logs = [g for g in logs if g.format != "hf_trainer_state"] + require_reader("hf_trainer_state").collapse(hf)
    logs, duplicates = run_files.one_run(logs)
    log = stitch(merge(logs))
    guard_events = [e for d in duplicates for e in d.events]
    if guard_events:  # the guard's decisions in a log whose points another source already gave
        log.events = sorted(log.events + guard_events,
                            key=lambda e: e["step"] if isinstance(e.get("step"), (int, float)) else 0)
    if skipped:
        log.metadata["skipped"] = skipped
    if duplicates:
        dropped = [src for d in duplicates for src in d.sources]
        if any(d.format == "hf_trainer_state" for d in duplicates):
            dropped += [src for src in hf_sources if src not in dropped]  # the checkpoints collapse() merged
        log.metadata["duplicate_sources"] = dropped
        kept_formats = {g.format for g in logs}
        copies = [src for d in duplicates if d.format in kept_formats for src in d.sources]
        if copies:  # a file copied twice into a directory: say so, it is not a resume
            other = "file" if len(copies) == 1 else "set of files"
            warnings.append(f"{', '.join(copies)}: the same points as another {other} "
                            "of this run (a copy): read once")
    if warnings:
        log.metadata["warnings"] = list(log.metadata.get("warnings", [])) + warnings
    if loss_key is not None and log.format != "text":
        _rename_loss(log, loss_key)
    return log


def _rename_loss(log: RunLog, loss_key: str) -> None:
    """``--loss-key`` on a format that names its series: that series becomes ``loss``."""
    from ..metrics import LOSS, canonical_name

    for name in (loss_key, canonical_name(loss_key)):
        if name in log.series:
            if name != LOSS:
                if LOSS in log.series:
                    log.series["loss_other"] = log.series.pop(LOSS)
                log.series[LOSS] = log.series.pop(name)
            return
    raise LossguardError(f"--loss-key {loss_key!r} names no series of this log",
                         fix=f"series read: {', '.join(sorted(log.series)[:20])}")


def read_each(paths: Iterable[str | os.PathLike]) -> list[RunLog]:
    """Read several logs as separate runs (each stitched on its own)."""
    return [read_log(p) for p in paths]


__all__ = ["READERS", "available_formats", "detect_format", "read_log", "read_each", "reader", "require_reader"]
