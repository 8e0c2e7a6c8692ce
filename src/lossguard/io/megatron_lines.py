"""The line grammar of Megatron-LM, Megatron-DeepSpeed and DeepSpeed stdout: one line -> what it says.

One definition for every reader of these lines: the Megatron reader (:mod:`lossguard.io.megatron`,
through :mod:`lossguard.io.megatron_launch`), the pasted-text reader (:mod:`lossguard.io.pasted`) and
``lossguard watch``. Each ``parse_*`` function takes one line and returns a typed record, or None
when the line is not of its kind; :func:`count_overflows` is the one rule for counting DeepSpeed's
fp16 overflows into a logged step. An overflow line is read by the text reader's rule
(:func:`lossguard.io.text.overflow.overflow_scales`): one definition of its wordings for both.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, Iterator, Sequence

from ..metrics import LOSS, VAL_LOSS, canonical_name
from .text.overflow import overflow_scales

ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)")
"""A Megatron iteration line: groups (step, total iterations, the ``|``-separated fields)."""
VALIDATION = re.compile(r"validation loss at iteration\s+(\d+)(?:\s+on\s+(\w+)\s+set)?\s*\|(.*)")
"""A Megatron validation line: groups (step, ``test`` for the test set or None, the fields)."""
_STAMP = re.compile(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)")
_UNIT = re.compile(r"\s*\(([^)]*)\)\s*")


@dataclass(frozen=True, kw_only=True)
class ProgressLine:
    """What one Megatron iteration or validation line reports.

    Attributes:
        step: the iteration the line is about.
        metrics: metric name -> value, in the metric's unit (``(ms)`` fields converted to seconds).
        text: the matched part of the line (the same text printed twice is one line, not a restart).
    """

    step: int
    metrics: dict[str, float]
    text: str


def parse_iteration(line: str) -> ProgressLine | None:
    """The step and metrics of a Megatron iteration line, or None when ``line`` is not one."""
    m = ITERATION.search(line)
    if m is None:
        return None
    metrics = {}
    for key, value in _fields(m.group(3)):
        name, scale = _metric(key)
        if name is not None:
            metrics[name] = value * scale
    return ProgressLine(step=int(m.group(1)), metrics=metrics, text=m.group(0))


def parse_validation(line: str) -> ProgressLine | None:
    """The step and ``val_*`` (or ``test_*``) metrics of a Megatron validation line, or None."""
    m = VALIDATION.search(line)
    if m is None:
        return None
    test = (m.group(2) or "validation").lower() == "test"
    metrics = {}
    for key, value in _fields(m.group(3)):
        name = _validation_metric(key, test)
        if name is not None:
            metrics[name] = value
    return ProgressLine(step=int(m.group(1)), metrics=metrics, text=m.group(0))


@dataclass(frozen=True, kw_only=True)
class Overflow:
    """One DeepSpeed fp16 overflow: a skipped step.

    Attributes:
        rank: the rank that printed it (0 when the line does not say).
        attempted: the loss scale the step was tried with.
        reduced: the scale after the overflow (half the attempted one when the line does not say).
    """

    rank: int
    attempted: float
    reduced: float


def parse_overflow(line: str) -> Overflow | None:
    """The overflow a DeepSpeed overflow line reports, or None when ``line`` is not one."""
    hit = overflow_scales(line)
    # DeepSpeed's wordings all name the attempted scale; a line naming only the new one is apex's or
    # fairseq's, which the text reader reads (it must not claim their logs as Megatron-DeepSpeed's).
    if hit is None or not math.isfinite(hit[1]):
        return None
    return Overflow(rank=hit[0], attempted=hit[1], reduced=hit[2])


def overflow_event(ov: Overflow, *, step: int, line: int) -> dict[str, Any]:
    """The ``fp16_overflow`` event of one overflow, counted into ``step``."""
    return {"step": step, "event": "fp16_overflow", "rank": ov.rank, "attempted_scale": ov.attempted,
            "new_scale": ov.reduced, "line": line}


@dataclass(frozen=True, kw_only=True)
class OverflowCount:
    """The overflows of one logging interval, counted into the step that ends it.

    Attributes:
        skipped: steps skipped in the interval: the most overflows any one rank printed (every rank
            prints the same overflow).
        scale: the loss scale after them, as the lowest rank printed it.
        line: the line of that rank's last overflow.
        events: one ``fp16_overflow`` event per overflow line, every rank's.
    """

    skipped: float
    scale: float
    line: int
    events: list[dict[str, Any]]


def count_overflows(pending: Sequence[tuple[Overflow, int]], step: int) -> OverflowCount:
    """Count ``(overflow, line)`` pairs (at least one) into ``step``: Megatron's own "number of skipped
    iterations" for the interval; the Megatron and the pasted-text readers both count this way."""
    per_rank: dict[int, int] = {}
    for ov, _ in pending:
        per_rank[ov.rank] = per_rank.get(ov.rank, 0) + 1
    lowest = min(per_rank)
    last, line = [p for p in pending if p[0].rank == lowest][-1]
    return OverflowCount(skipped=float(max(per_rank.values())), scale=last.reduced, line=line,
                         events=[overflow_event(ov, step=step, line=n) for ov, n in pending])


def _fields(text: str) -> Iterator[tuple[str, float]]:
    """Yield ``(key, number)`` for every ``key: number`` field of a ``|``-separated line."""
    for part in text.split("|"):
        key, sep, rest = part.partition(":")
        if not sep:  # Megatron-LM before 2020 wrote "lm loss 6.758929E+00 | loss scale 64.0 |", no colon
            key, sep, rest = part.strip().rpartition(" ")
            if not sep:
                continue
        token = rest.split(None, 1)[0] if rest and not rest.isspace() else ""
        try:
            value = float(token)  # also reads nan, inf, -inf, as PyTorch prints them
        except ValueError:
            continue
        yield key, value


@lru_cache(maxsize=1024)
def _metric(key: str) -> tuple[str | None, float]:
    """Iteration-line key -> (metric name, factor to the metric's unit)."""
    scale = 1.0
    unit = _UNIT.search(key)
    if unit is not None:
        if unit.group(1).strip().lower() == "ms":
            scale = 1e-3
        key = _UNIT.sub(" ", key)
    low = " ".join(key.lower().split())
    if not low:
        return None, scale
    if low.startswith("lm loss ") and len(low) > len("lm loss "):
        stream = low[len("lm loss "):].replace(" ", "_")
        return f"{LOSS}/{stream}", scale
    return canonical_name(low), scale


@lru_cache(maxsize=1024)
def _validation_metric(key: str, test: bool) -> str | None:
    """Validation-line key -> metric name (``val_*``, or ``test_*`` for the test set), or None."""
    low = " ".join(key.lower().split())
    prefix = "test" if test else "val"
    if low == "lm loss value":
        return "test_lm_loss" if test else VAL_LOSS
    if low == "lm loss ppl":
        return f"{prefix}_ppl"
    if low.endswith(" value"):
        return f"{prefix}_{low[:-len(' value')].replace(' ', '_')}"
    if low.endswith(" ppl"):
        return f"{prefix}_{low[:-len(' ppl')].replace(' ', '_')}_ppl"
    return None


def stamp(line: str) -> float | None:
    """The Unix time of a ``[2024-05-01 12:00:00]`` or ``datetime: ...`` stamp in ``line`` (read as UTC), or None."""
    m = _STAMP.search(line)
    if m is None:
        return None
    try:
        when = datetime.strptime(f"{m.group(1)} {m.group(2)}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return when.replace(tzinfo=timezone.utc).timestamp()
