"""Checkpoint names: the one parser of checkpoint directory and file names, for every convention.

Who names checkpoints, and how (the step is always the decimal number in the name):

- lossguard's :class:`CheckpointStore`: ``step-00001200`` (8+ digits), and its side entries
  ``.tmp-step-...`` / ``.old-step-...`` / ``.trash-step-...-<pid>-<n>`` while a save or a prune is
  under way (:data:`STORE_NAME`, :data:`STORE_SIDE`);
- HF Trainer: ``checkpoint-1200`` (``tmp-checkpoint-1200`` while it is written);
- Lightning: files with ``step=1200`` in the name (``filename="{step}"``);
- Megatron ``iter_0001200``, DeepSpeed ``global_step1200``, and ``step_1200`` / ``ckpt-1200``.

``lossguard analyze --checkpoints DIR`` reads any of them (:func:`checkpoint_step`), the framework
callbacks read their own one strictly (:func:`framework_step`), and ``lossguard watch`` tells a run
directory from a directory of checkpoints by them (:func:`looks_like_checkpoint`). Torch-free.
"""
from __future__ import annotations

import re

__all__ = ["STORE_NAME", "STORE_SIDE", "FRAMEWORKS", "checkpoint_step", "framework_step", "in_progress",
           "looks_like_checkpoint", "store_name"]

STORE_NAME = re.compile(r"^step-(\d{8,})$")
"""A finished checkpoint of lossguard's store; group 1 is the step."""
STORE_SIDE = re.compile(r"^\.(tmp|old|trash)-step-(\d{8,})-(\d+)-\d+$")
"""A side entry of lossguard's store: kind, step, writer's pid."""

_ANY = re.compile(r"(?:checkpoint|iter|step|global_step|ckpt)[-_=]?0*(\d+)", re.IGNORECASE)
# Checkpoints still being written (or left by a killed writer) are not restorable: lossguard's own
# store writes ``.tmp-step-N-...``, HF Trainer ``tmp-checkpoint-N``.
_IN_PROGRESS = re.compile(r"^(?:\.|tmp)", re.IGNORECASE)
# A directory entry that starts like a checkpoint (``epoch`` too: a sweep's run directory is never
# named so), anchored so that a run called ``warmup_step100`` is not taken for one.
_LEADING = re.compile(r"^(checkpoint|ckpt|iter|step|global_step|epoch)[-_]?\d+", re.IGNORECASE)

FRAMEWORKS = {"hf": re.compile(r"^checkpoint-(\d+)$"), "lightning": re.compile(r"(?:^|[-_])step=(\d+)(?:[-_.]|$)")}
"""The strict name of each framework's checkpoints (HF: the directory name; Lightning: the file's stem)."""


def store_name(step: int) -> str:
    """The directory name lossguard's store gives the checkpoint of ``step``."""
    return f"step-{int(step):08d}"


def in_progress(name: str) -> bool:
    """True for an entry still being written or left by a killed writer (never restorable)."""
    return bool(_IN_PROGRESS.match(name))


def checkpoint_step(name: str) -> int | None:
    """The step of a checkpoint entry in any of the conventions above; None for an entry in
    progress or a name that is no checkpoint's."""
    if in_progress(name):
        return None
    m = _ANY.search(name)
    return int(m.group(1)) if m else None


def framework_step(name: str, kind: str) -> int | None:
    """The step of a checkpoint written by framework ``kind`` (a key of :data:`FRAMEWORKS`), strictly;
    Lightning names are matched on the file's stem (pass ``stem + "."``)."""
    m = FRAMEWORKS[kind].search(name)
    return int(m.group(1)) if m else None


def looks_like_checkpoint(name: str) -> bool:
    """True when a directory entry is named like a checkpoint (``lossguard watch``'s sweep test)."""
    return bool(_LEADING.match(name))
