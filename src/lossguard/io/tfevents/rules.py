"""The reading rules that the event-file reader and ``lossguard watch`` share.

:mod:`lossguard.io.tensorboard` reads a whole file at once and :mod:`lossguard.watch.tfevents`
follows a growing one; both must name a tag and cut a file into launches the same way, or a watched
run and its later analysis would disagree. The rules:

* :func:`stream_name`: the sub-directory that ``add_scalars(main_tag, {key: value})`` writes
  (``<main_tag>/<key>/`` with tensorboardX, ``<main_tag>_<key>/`` with torch.utils.tensorboard, each
  holding tag ``main_tag``) makes the tag a stream metric (``loss/cm4``).
* :func:`restart_records`: a judged tag's step going strictly backwards inside one file starts a new
  launch (a process that restarted and appended), as TensorBoard's own loader treats it.
* :func:`judges_restarts`: only the run's main metrics judge restarts when a file has any
  (bookkeeping tags are re-logged at any step).
* :func:`wall_time_at`: a record's wall time, or None where the writer left none.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ...metrics import canonical_name, is_main


def stream_name(path: Path, root: Path, tag: str) -> str | None:
    """The stream metric of ``tag`` in an ``add_scalars`` sub-directory of either writer, else None.

    Args:
        path: the event file.
        root: the run directory the user named; only directories below it can name a stream.
        tag: the tag as written in the file.
    """
    try:
        rel = path.parent.resolve().relative_to(root.resolve()).as_posix()
    except (ValueError, OSError):
        return None
    if rel in (".", ""):
        return None
    parts, tag_parts = rel.split("/"), tag.split("/")
    # tensorboardX: <logdir>/<main_tag>/<key>/ holds tag main_tag
    if len(parts) > len(tag_parts) and parts[-1 - len(tag_parts):-1] == tag_parts:
        return canonical_name(f"{tag}/{parts[-1]}")
    # torch.utils.tensorboard: <logdir>/<main_tag with '/' -> '_'>_<key>/ holds tag main_tag
    prefix = tag.replace("/", "_") + "_"
    if parts[-1].startswith(prefix) and len(parts[-1]) > len(prefix):
        return canonical_name(f"{tag}/{parts[-1][len(prefix):]}")
    return None


def judges_restarts(metric: str) -> bool:
    """True for a canonical metric whose steps decide restarts (a main metric: loss, lr, ...)."""
    return is_main(metric)


def restart_records(tags: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> list[int]:
    """Records at which some tag's step goes strictly backwards: restarts inside one file.

    Args:
        tags: tag id -> (record indices, steps, values) of the judged tags, in write order.

    Returns:
        The record index of each restart, ascending.
    """
    pairs: list[tuple[int, int]] = []
    for rec, steps, _ in tags.values():
        cand = np.flatnonzero(steps[1:] < steps[:-1]) + 1
        pairs += zip(rec[cand].tolist(), rec[cand - 1].tolist(), strict=True)
    accepted: list[int] = []
    for at, prev in sorted(pairs):
        # A later tag going back at the same restart is already covered by the boundary found.
        if (not accepted or accepted[-1] <= prev) and at > prev:
            accepted.append(at)
    return accepted


def wall_time_at(wall: np.ndarray, record: int) -> float | None:
    """The Unix wall time of ``record``, or None when the writer left none (0, NaN or missing)."""
    if record < len(wall) and np.isfinite(wall[record]) and wall[record] > 0:
        return float(wall[record])
    return None
