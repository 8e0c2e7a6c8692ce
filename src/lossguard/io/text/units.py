"""A step counter that counts samples, not optimizer steps, and the flag that converts it.

Some trainers number their lines by the samples seen: PyTorch's examples and open_clip print
``Train Epoch: 3 [40960/819200 (5%)]``, where 40960 is ``batches x batch size x world size``. The
text does not hold the batch size, so the reader cannot turn samples into steps itself: it reads the
counter in its own units (every event and onset is then in samples) and, when the counter advances by
at least :data:`SAMPLE_STRIDE` per loss line inside an epoch, says so in a warning naming the flag:
``--step-key KEY/N`` (or ``/N`` for the counter the reader chose) divides the counter by ``N``, the
samples per optimizer step (the global batch size).
"""
from __future__ import annotations

import re

import numpy as np

SAMPLE_STRIDE = 256
"""A per-epoch counter advancing this much or more per loss line is likely a sample count (a batch
counter logged every 256 batches or more prints a handful of lines per epoch, rarely)."""
_DIVISOR = re.compile(r"^(.*?)\s*/\s*(\d+)\s*$")


def split_divisor(step_key: str | None) -> tuple[str | None, int]:
    """``("epoch*batch", 4096)`` for ``"epoch*batch/4096"``, ``(None, 4096)`` for ``"/4096"``; a key
    without a numeric divisor (``global_step/max_steps``) is returned whole with 1."""
    if step_key is None:
        return None, 1
    m = _DIVISOR.match(step_key)
    if m is None or int(m.group(2)) < 1:
        return step_key, 1
    return (m.group(1).strip() or None), int(m.group(2))


def to_steps(steps: np.ndarray, per_step: int, per_epoch_counter: np.ndarray | None) -> tuple[np.ndarray, list[str]]:
    """The steps divided by ``per_step`` (with a warning), or as they are with a warning when
    ``per_epoch_counter`` (the batch column of an ``epoch x batches + batch`` numbering, in line order)
    looks like a sample count."""
    if per_step > 1:
        rest = int(np.count_nonzero(steps % per_step))
        note = (f"; {rest} step(s) are not a whole number of {per_step} and are rounded down" if rest else "")
        return steps // per_step, [f"the step counter is divided by {per_step} (--step-key .../{per_step}){note}"]
    if per_epoch_counter is None or len(per_epoch_counter) < 3:
        return steps, []
    d = np.diff(per_epoch_counter)
    d = d[d > 0]
    if not len(d) or float(np.median(d)) < SAMPLE_STRIDE:
        return steps, []
    stride = int(np.median(d))
    return steps, [f"the step counter advances by {stride} per loss line within an epoch: it may count samples, "
                   "not optimizer steps (every step reported is then in samples); pass --step-key '/N' with N the "
                   "samples per step (the global batch size) to number optimizer steps"]
