"""A crash line that names a non-finite value at a step: where a run stopped on a NaN.

Megatron's default on a NaN loss is to raise, ``RuntimeError: Rank 0, ..., iteration 2151:
Unexpected result nan (message='found NaN in local forward loss calculation')``; other trainers
print ``Loss is nan at step 812, stopping training`` or ``Batch 49: Invalid loss, terminating
training``. Such a line is read, by any reader of text, as a non-finite loss at that step
(:mod:`.stop` says when). The test is general: an error-like line (``error``, ``exception``,
``found``, ``detected``, ``stopping`` ...) holding a ``nan``/``inf`` word (or an invalid loss named
in words) and a counter (``iteration N``, ``step N``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .names import StepKind, step_kind

_NONFINITE = re.compile(r"(?<![\w.])(?:nan|inf|infinity)(?!\w)|\b(?:invalid|non-?finite|not finite)\s+loss\b", re.I)
"""A NaN/Inf word, or an invalid / non-finite loss named in words (Keras' ``TerminateOnNaN``: ``Batch 49:
Invalid loss, terminating training``)."""
ERRORISH = re.compile(r"error|exception|abort|found|detected|encountered|diverg|stopp|terminat|invalid", re.I)
"""Words of an error-like line (one definition: the template marks such lines, :func:`crash_step` reads them)."""
_LOSS = re.compile(r"loss|objective", re.I)
_COUNTER = re.compile(r"(?<![^\W\d])(global[ _]step|step|iteration|iter|it|update|batch|epoch)\b[\s:=#]*(\d+)", re.I)
"""A counter and its value; a word glued after a number counts (a crash message printed over a bar's
last redraw: ``loss: 2.6745Batch 49: ...``)."""


def crash_step(line: str) -> tuple[StepKind | None, int | None] | None:
    """(counter kind, step) of a crash line naming a NaN/Inf, ``(None, None)`` for one that names no
    step (``ValueError: nan loss encountered``: the step after the last one logged), or None for any
    other line."""
    if not _NONFINITE.search(line) or not ERRORISH.search(line):
        return None
    counters = [(step_kind(m.group(1)), int(m.group(2))) for m in _COUNTER.finditer(line)]
    found = [(k, s) for k, s in counters if k is not None]
    if not found:
        return (None, None) if _LOSS.search(line) else None
    return min(found, key=lambda f: f[0])


@dataclass
class Crash:
    """A line that names a NaN/Inf and a counter: where a run stopped on a non-finite loss."""

    line: int
    kind: StepKind | None
    step: int | None
    text: str
