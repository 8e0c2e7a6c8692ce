"""One run or several: which files in a run directory are logs, and whether their parts are one run.

A run directory as the real writers leave it holds more than one log of the same run:

* HF ``Trainer``: TensorBoard events under ``runs/`` *and* a ``trainer_state.json`` in every
  ``checkpoint-*`` that repeats the history;
* Lightning with ``TensorBoardLogger`` and ``CSVLogger``: the same points in event files and in
  ``metrics.csv``;
* side files that are not logs at all but look like one to a content sniffer (Lightning's
  ``hparams.yaml`` holding ``{}``, W&B's ``debug-core.log`` of JSON lines, ``wandb-summary.json``).

The rules (:func:`one_run`):

1. Side files (:func:`is_side_file`) are never sniffed; they are listed as skipped.
2. Logs of different formats are compared on a metric they share (loss first). When every point of
   one, at the steps both logged, equals a point of the other (to float32, as TensorBoard stores
   it), and one has no step the other lacks, that one is a copy: its points are not read, it is
   listed in ``metadata["duplicate_sources"]`` (its events, e.g. the guard's decisions, are kept).
   When each is a copy of the other, :data:`SOURCE_PREFERENCE` picks. Points are never counted
   twice; a resume that another tool logged on from an exact checkpoint (same points where they
   overlap, new steps after) is not a copy.
3. When they differ and the later one starts no later than the earlier one's second logged step,
   they are separate runs (two launches from scratch): an error names both sets of files and how to
   read one (a narrower path, or ``--only``).
4. Otherwise (no shared step, or a later start: a resume or a rollback written by another tool) the
   parts are segments of one run.
5. Logs that name their run (W&B run ids) are separate runs when the ids differ.
"""
from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import LossguardError
from ..metrics import GRAD_NORM, LOSS, LR, VAL_LOSS
from ..runlog import RunLog

SOURCE_PREFERENCE = ("tensorboard", "wandb", "lightning", "megatron", "jsonl", "csv", "hf_trainer_state")
"""When two formats hold the same points, the first of these is kept. TensorBoard first: it has
wall times and keeps the points a rollback superseded; ``trainer_state.json`` last: each
checkpoint's copy holds only the history that led to it."""

_COMPARED = (LOSS, VAL_LOSS, GRAD_NORM, LR)

_SIDE_NAMES = frozenset({
    # Lightning, HF and general configs
    "hparams.yaml", "config.yaml", "config.json", "generation_config.json", "tokenizer.json",
    "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt",
    "preprocessor_config.json", "adapter_config.json", "model.safetensors.index.json", "training_args.bin",
    # HF example scripts' end-of-run summaries and model card: one object each, no steps
    "all_results.json", "train_results.json", "eval_results.json", "predict_results.json", "README.md",
    # W&B run directories: metadata and the SDK's own debug logs, not the run's history
    "wandb-metadata.json", "wandb-summary.json", "requirements.txt", "conda-environment.yaml",
    "debug.log", "debug-internal.log", "debug-core.log",
    # DeepSpeed checkpoint pointer
    "latest",
})
_SIDE_SUFFIXES = (".yaml", ".yml", ".bin", ".safetensors", ".pt", ".pth", ".ckpt", ".lock", ".wandb.synced")

WANDB_DEBUG_FILES = frozenset({"debug.log", "debug-internal.log", "debug-core.log", "wandb-metadata.json",
                               "wandb-summary.json", "output.log"})
"""Files of a W&B run directory that do not hold the run's history."""


def is_side_file(path: Path) -> bool:
    """True for files the real writers put beside their logs that are never logs themselves.

    W&B's console capture ``files/output.log`` counts as one when the run's ``run-*.wandb`` history
    sits in the directory above: the history is the source of truth, not the printed copy.
    """
    name = path.name
    if name in _SIDE_NAMES or name.endswith(_SIDE_SUFFIXES):
        return True
    if name.startswith("debug-cli.") and name.endswith(".log"):
        return True  # the W&B CLI's own debug log
    if name == "output.log" and path.parent.name == "files":
        return any(path.parent.parent.glob("run-*.wandb"))
    return False


def selected(path: Path, root: Path | None, only: Sequence[str]) -> bool:
    """True when ``path`` matches one of the ``only`` globs (relative to ``root``, or by file name)."""
    if not only:
        return True
    names = [path.name, path.as_posix()]
    if root is not None:
        try:
            names.append(path.relative_to(root).as_posix())
        except ValueError:
            pass
    return any(fnmatch(n, pattern) for pattern in only for n in names)


def explain_unreadable(skipped: list[str]) -> LossguardError | None:
    """A specific error for a directory holding only a W&B run's side files, or None."""
    names = {Path(s).name for s in skipped}
    if names & {"debug-core.log", "debug-internal.log", "wandb-metadata.json"}:
        return LossguardError(
            "this is a W&B run directory without the run's history: it holds only W&B's own files "
            f"({', '.join(sorted(names & WANDB_DEBUG_FILES)) or ', '.join(sorted(names))})",
            path=str(Path(skipped[0]).parent),
            fix="point lossguard at the run's run-<id>.wandb file (an offline run keeps it in "
                "wandb/offline-run-*/; reading it needs 'pip install lossguard[wandb]'), or export the "
                "history: `wandb sync` the run, then `wandb.Api().run(path).history().to_csv('history.csv')`")
    return None


def _points(logs: list[RunLog], metric: str) -> tuple[np.ndarray, np.ndarray]:
    parts = [log.series[metric] for log in logs if metric in log.series]
    steps = np.concatenate([p.steps for p in parts])
    values = np.concatenate([p.values for p in parts]).astype(np.float32)
    return steps, values


def _at(points: tuple[np.ndarray, np.ndarray], steps: np.ndarray) -> set[tuple[int, int]]:
    """The (step, float32 bit pattern) pairs of ``points`` at ``steps``: NaN equals NaN, as logged."""
    keep = np.isin(points[0], steps)
    return set(zip(points[0][keep].tolist(), points[1][keep].view(np.int32).tolist()))


def _same_points(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool | None:
    """True when, at the steps both logged, every point of one side is also a point of the other
    (the side with superseded points holds more); None when they share no step."""
    common = np.intersect1d(a[0], b[0])
    if not len(common):
        return None
    small, big = sorted((_at(a, common), _at(b, common)), key=len)
    return small <= big


def _files(logs: list[RunLog]) -> str:
    sources = [s for log in logs for s in log.sources]
    shown = ", ".join(sources[:3])
    return shown + (f" and {len(sources) - 3} more" if len(sources) > 3 else "")


def one_run(logs: list[RunLog]) -> tuple[list[RunLog], list[RunLog]]:
    """Keep one source per run and check that what remains is one run (see the module docstring).

    Args:
        logs: unstitched RunLogs, one per file or run directory, in reading order.

    Returns:
        The logs to merge, and the logs dropped as duplicates of a preferred one (their events,
        such as the guard's decisions in its JSONL log, are still worth keeping).

    Raises:
        LossguardError: the logs are separate runs; the message names the files of each.
    """
    ids = {log.metadata.get("run_id") for log in logs if log.metadata.get("run_id")}
    if len(ids) > 1:
        groups = {i: [log for log in logs if log.metadata.get("run_id") == i] for i in sorted(ids)}
        raise _separate("W&B runs " + ", ".join(repr(i) for i in groups), list(groups.values()))
    by_format: dict[str, list[RunLog]] = {}
    for log in logs:
        by_format.setdefault(log.format, []).append(log)
    if len(by_format) < 2:
        return logs, []
    formats = sorted(by_format, key=lambda f: SOURCE_PREFERENCE.index(f) if f in SOURCE_PREFERENCE else len(SOURCE_PREFERENCE))
    kept: list[str] = []
    dropped: list[str] = []
    for fmt in formats:
        for other in list(kept):
            copy = _copy_of(fmt, other, by_format)
            if copy == fmt:
                dropped.append(fmt)
                break
            if copy == other:
                kept.remove(other)
                dropped.append(other)
        else:
            kept.append(fmt)
    return [log for log in logs if log.format in kept], [log for log in logs if log.format in dropped]


def _copy_of(fmt: str, other: str, by_format: dict[str, list[RunLog]]) -> str | None:
    """Which of two formats' logs is a copy of the other's points (``fmt`` on a tie), or None.

    A copy holds the same points at the steps both logged, and no step the other lacks: an HF
    ``trainer_state.json`` beside the events, not a resume that a second tool logged on from a
    deterministic checkpoint (same points where they overlap, new steps after).

    Raises:
        LossguardError: the two are separate runs: they start at the same step with different values.
    """
    group, theirs_logs = by_format[fmt], by_format[other]
    metric = next((m for m in _COMPARED if any(m in g.series for g in group)
                   and any(m in g.series for g in theirs_logs)), None)
    if metric is None:
        return None  # nothing in common to compare: complementary logs of one run
    mine, theirs = _points(group, metric), _points(theirs_logs, metric)
    same = _same_points(mine, theirs)
    if same:
        if np.isin(mine[0], theirs[0]).all():
            return fmt
        if np.isin(theirs[0], mine[0]).all():
            return other
        return None
    if same is False:
        first, later = sorted((mine, theirs), key=lambda p: int(p[0].min()))
        # A resume or rollback starts from a checkpoint taken after the first run logged
        # something; a second launch from scratch starts where the first one did.
        starts = np.unique(first[0])[:2]
        if int(later[0].min()) <= int(starts[-1]):
            raise _separate(f"{fmt} and {other} logs", [group, theirs_logs],
                            detail=f"both start at step {int(first[0].min())} with different {metric} values")
    return None


def _separate(what: str, groups: list[list[RunLog]], detail: str = "") -> LossguardError:
    listing = "; ".join(f"run {i + 1}: {_files(g)}" for i, g in enumerate(groups))
    return LossguardError(
        f"these files look like {len(groups)} separate runs ({what}{', ' + detail if detail else ''}), "
        f"not one run: {listing}",
        fix="read one run at a time: name a narrower path, or pick files with --only GLOB "
            "(for example --only 'runs/*' or --only '*.csv')")
