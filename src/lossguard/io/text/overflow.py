"""fp16 overflow lines in any text log: what the dynamic loss scale did between two logged steps.

A mixed-precision trainer that skips a step on an overflow says so in a line of its own, with the
loss scale it falls back to; the per-step line often prints no loss scale at all. The wordings read:

* DeepSpeed's loss scaler and fused fp16 optimizer, ``OVERFLOW! Rank 0 Skipping step. Attempted loss
  scale: 65536, reducing to 32768``, ``fp16 dynamic loss scale overflow! Skipping step. Attempted loss
  scale: ...``, and its newer ``[Rank 0] Overflow detected. Skipping step. Attempted loss scale: 1,
  reducing to 1``;
* NVIDIA's ``fp16_optimizer`` (tacotron2, waveglow), ``OVERFLOW! Skipping step. Attempted loss scale:
  65536.0`` (no reduced scale: half the attempted one);
* apex amp, ``Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0``;
* fairseq, ``NOTE: gradient overflow detected, ignoring gradient, setting loss scale to: 64.0``.

Each line is one skipped step, counted into the next logged step (the step that ends the interval,
as Megatron's "number of skipped iterations" counts them): that step gets the loss scale after the
interval's last overflow (``loss_scale``) and the number of overflows (``skipped_iters``), and each
overflow an ``fp16_overflow`` event. Lines from a rank other than the lowest one seen are left out
(every rank prints the same overflow). When the loss lines print a loss scale of their own, theirs
is kept and the overflow lines only add events.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ...metrics import LOSS, LOSS_SCALE, SKIPPED_ITERS

_NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
OVERFLOW = re.compile(
    r"overflow(?:!|\.|\s+detected)(?:.*?\bRank\s+(\d+))?.*?(?:"
    r"attempted loss scale:?\s*" + _NUM + r"(?:,?\s*reducing to:?\s*" + _NUM + r")?"
    r"|(?:reducing|setting) (?:the )?loss scale to:?\s*" + _NUM + r")", re.I)
"""One overflow line, in the wordings above: groups (rank, attempted scale, reduced scale, scale set)."""


@dataclass(frozen=True)
class Overflow:
    """One skipped step, as its line says.

    Attributes:
        line: the line number.
        rank: the rank the line names (0 when it names none).
        scale: the loss scale after the overflow (half the attempted one when the line does not say).
    """

    line: int
    rank: int
    scale: float


def overflow_scales(text: str) -> tuple[int, float, float] | None:
    """``(rank, attempted scale, scale after)`` of the overflow line ``text``, or None when it is no
    overflow line or names no finite scale. The one reading of :data:`OVERFLOW`, shared with the
    Megatron/DeepSpeed line grammar (:func:`lossguard.io.megatron_lines.parse_overflow`). The
    attempted scale is NaN on a line that names only the new one (apex, fairseq); the scale after is
    half the attempted one on a line that names only that (the scalers halve it)."""
    m = OVERFLOW.search(text)
    if m is None:
        return None
    rank, attempted, reduced, scale_set = m.groups()
    if scale_set is not None:
        tried, after = float("nan"), float(scale_set)
    else:
        tried = float(attempted)
        after = float(reduced) if reduced is not None else tried / 2
    if not math.isfinite(after):
        return None
    return int(rank or 0), tried, after


def parse_overflow(number: int, text: str) -> Overflow | None:
    """The overflow line ``text`` reports, or None when it is no overflow line."""
    hit = overflow_scales(text)
    return None if hit is None else Overflow(line=number, rank=hit[0], scale=hit[2])


def overflow_points(overflows: list[Overflow], metrics: dict) -> tuple[dict, list[dict]]:
    """The ``loss_scale`` and ``skipped_iters`` points and the ``fp16_overflow`` events of the overflows.

    Args:
        overflows: the overflow lines, in line order.
        metrics: the reader's points so far, metric -> (segment, step, value, line) arrays; the
            loss points place each overflow at the first loss line after it.

    Returns:
        (the new metrics, to add; empty when the loss lines print a loss scale of their own or no
        overflow has a loss line after it), the events.
    """
    if not overflows or LOSS not in metrics:
        return {}, []
    lowest = min(o.rank for o in overflows)
    mine = [o for o in overflows if o.rank == lowest]
    seg, step, _, line = metrics[LOSS]
    by_line = np.argsort(line, kind="stable")
    at = np.searchsorted(line[by_line], np.array([o.line for o in mine]), side="right")
    per_step: dict[tuple[int, int], tuple[float, int, int]] = {}  # (segment, step) -> (scale, count, line)
    events = []
    for o, k in zip(mine, at.tolist(), strict=True):
        if k >= len(by_line):
            continue  # after the last loss line: no logged step to count it into
        j = by_line[k]
        key = (int(seg[j]), int(step[j]))
        _, count, _ = per_step.get(key, (0.0, 0, 0))
        per_step[key] = (o.scale, count + 1, o.line)
        events.append({"step": key[1], "event": "fp16_overflow", "rank": o.rank, "new_scale": o.scale,
                       "line": o.line})
    if not per_step or LOSS_SCALE in metrics:
        return {}, events
    keys = sorted(per_step)
    segs = np.array([k[0] for k in keys], dtype=np.int64)
    steps = np.array([k[1] for k in keys], dtype=np.int64)
    lines = np.array([per_step[k][2] for k in keys], dtype=np.int64)
    scale = np.array([per_step[k][0] for k in keys], dtype=np.float64)
    skipped = np.array([per_step[k][1] for k in keys], dtype=np.float64)
    return {LOSS_SCALE: (segs, steps, scale, lines), SKIPPED_ITERS: (segs, steps, skipped, lines)}, events
