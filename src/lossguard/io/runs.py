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
2. Every two logs, of one format or of two, are compared on a metric they share (loss first).
   When every point of one, at the steps both logged, equals a point of the other (to float32, as
   TensorBoard stores it), and one has no step the other lacks, that one is a copy: its points are
   not read, it is listed in ``metadata["duplicate_sources"]`` (its events, e.g. the guard's
   decisions, are kept). Between formats :data:`SOURCE_PREFERENCE` picks which is kept; between
   two files of one format (a file copied twice) the first, and :func:`~lossguard.io.read_log`
   warns. Points are never counted twice; a resume logged on from an exact checkpoint (same points
   where they overlap, new steps after) is not a copy.
3. Two logs contradict each other when they differ at the steps both logged and the later one
   starts no later than the earlier one's second logged step: a resume or a rollback starts from a
   checkpoint taken after the run logged something, so these are two launches from scratch. The
   logs are grouped into the runs they look like (:func:`_apparent_runs`); more than one is an
   error that names the files of each run and how to read one (a narrower path, or ``--only``).
4. Otherwise (no shared step, or a later start: a resume or a rollback, in any format) the parts are
   segments of one run.
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


def _points(log: RunLog, metric: str) -> tuple[np.ndarray, np.ndarray]:
    s = log.series[metric]
    return s.steps, s.values.astype(np.float32)


def _at(points: tuple[np.ndarray, np.ndarray], steps: np.ndarray) -> np.ndarray:
    """The distinct (step, float32 bit pattern) pairs of ``points`` at ``steps``, each packed in one
    int64 (NaN equals NaN, as logged): compared with numpy, a million-point copy costs no Python set."""
    keep = np.isin(points[0], steps)
    step = points[0][keep].astype(np.int64)
    bits = points[1][keep].view(np.uint32).astype(np.int64)
    return np.unique((step << 32) | bits)


def _same_points(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool | None:
    """True when, at the steps both logged, every point of one side is also a point of the other
    (the side with superseded points holds more); None when they share no step."""
    common = np.intersect1d(a[0], b[0])
    if not len(common):
        return None
    if common.min() < 0 or common.max() >= 2 ** 31:  # does not pack into 32 bits: compare as sets
        pairs = [set(zip(p[0][np.isin(p[0], common)].tolist(),
                         p[1][np.isin(p[0], common)].view(np.int32).tolist(), strict=True)) for p in (a, b)]
        fewer, more = sorted(pairs, key=len)
        return fewer <= more
    small, big = sorted((_at(a, common), _at(b, common)), key=len)
    return bool(np.isin(small, big, assume_unique=True).all())


def _files(logs: list[RunLog]) -> str:
    sources = [s for log in logs for s in log.sources]
    shown = ", ".join(sources[:3])
    return shown + (f" and {len(sources) - 3} more" if len(sources) > 3 else "")


def _rank(fmt: str) -> int:
    return SOURCE_PREFERENCE.index(fmt) if fmt in SOURCE_PREFERENCE else len(SOURCE_PREFERENCE)


class _Pair:
    """Two logs compared on the first metric of :data:`_COMPARED` both have (None when none)."""

    def __init__(self, a: RunLog, b: RunLog) -> None:
        self.metric = next((m for m in _COMPARED if m in a.series and m in b.series
                            and len(a.series[m]) and len(b.series[m])), None)
        if self.metric is not None:
            self.a, self.b = _points(a, self.metric), _points(b, self.metric)
            self.same = _same_points(self.a, self.b)

    def copy(self) -> str | None:
        """"a" or "b" when that side's points are all points of the other ("a" on a tie), else None.

        A copy holds the same points at the steps both logged, and no step the other lacks: an HF
        ``trainer_state.json`` beside the events, a file copied twice into a directory; not a
        resume logged on from a deterministic checkpoint (same points where they overlap, new
        steps after).
        """
        if self.metric is None or not self.same:
            return None
        if np.isin(self.a[0], self.b[0]).all():
            return "a"
        if np.isin(self.b[0], self.a[0]).all():
            return "b"
        return None

    def contradiction(self) -> str | None:
        """Why the two cannot be parts of one run, or None.

        A resume or a rollback starts from a checkpoint taken after the run logged something, so it
        starts later than the run's second logged step; two logs that start no later than that
        with different values at the steps both logged are two launches from scratch.
        """
        if self.metric is None or self.same is not False:
            return None  # nothing to compare, no shared step, or the same points: no contradiction
        first, later = sorted((self.a, self.b), key=lambda p: int(p[0].min()))
        starts = np.unique(first[0])[:2]
        if int(later[0].min()) > int(starts[-1]):
            return None
        where = (f"both start at step {int(first[0].min())}" if int(later[0].min()) == int(first[0].min())
                 else f"they start at steps {int(first[0].min())} and {int(later[0].min())}")
        return f"{where} with different {self.metric} values, and a resume starts later, at a checkpoint"


def one_run(logs: list[RunLog]) -> tuple[list[RunLog], list[RunLog]]:
    """Keep one source per run and check that what remains is one run (see the module docstring).

    Args:
        logs: unstitched RunLogs, one per file or run directory, in reading order.

    Returns:
        The logs to merge, and the logs dropped as copies of a kept one (their events, such as the
        guard's decisions in its JSONL log, are still worth keeping); both in reading order.

    Raises:
        LossguardError: the logs look like separate runs; the message names the files of each.
    """
    ids = {rid for log in logs if (rid := log.metadata.get("run_id"))}
    if len(ids) > 1:
        groups = {i: [log for log in logs if log.metadata.get("run_id") == i] for i in sorted(ids)}
        raise _separate("W&B runs " + ", ".join(repr(i) for i in groups), list(groups.values()))
    if len(logs) < 2:
        return logs, []
    kept: list[int] = []
    dropped: list[int] = []
    for i in sorted(range(len(logs)), key=lambda i: (_rank(logs[i].format), i)):  # preferred first
        for j in list(kept):
            copy = _Pair(logs[i], logs[j]).copy()
            if copy == "a":
                dropped.append(i)
                break
            if copy == "b":
                kept.remove(j)
                dropped.append(j)
        else:
            kept.append(i)
    runs, why = _apparent_runs([logs[i] for i in sorted(kept)])
    if len(runs) > 1:
        formats = sorted({log.format for log in logs})
        raise _separate(f"{' and '.join(formats)} logs", runs, detail=why)
    return [logs[i] for i in sorted(kept)], [logs[i] for i in sorted(dropped)]


def _apparent_runs(logs: list[RunLog]) -> tuple[list[list[RunLog]], str]:
    """Group ``logs`` into the runs they look like, and the first contradiction that split them.

    In order of their first step, each log joins the first group none of whose logs it
    contradicts (:meth:`_Pair.contradiction`); a log that continues any run (a later start, no
    shared step) joins the first.
    """
    groups: list[list[RunLog]] = []
    why = ""
    for log in sorted(logs, key=lambda g: min((int(s.steps.min()) for s in g.series.values() if len(s)), default=0)):
        for group in groups:
            reasons = [r for other in group if (r := _Pair(log, other).contradiction())]
            if not reasons:
                group.append(log)
                break
            why = why or reasons[0]
        else:
            groups.append([log])
    return groups, why


def _separate(what: str, groups: list[list[RunLog]], detail: str = "") -> LossguardError:
    listing = "; ".join(f"run {i + 1}: {_files(g)}" for i, g in enumerate(groups))
    example = Path(groups[0][0].sources[0]).name if groups[0] and groups[0][0].sources else "runs/*"
    return LossguardError(
        f"these files look like {len(groups)} separate runs ({what}{': ' + detail if detail else ''}), "
        f"not one run: {listing}",
        fix="read one run at a time: name a narrower path, or pick its files with --only GLOB "
            f"(for example --only '{example}'; the glob matches file names or paths inside the directory)")
