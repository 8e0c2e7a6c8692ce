"""The polling loop of ``lossguard watch``: poll, report stalls, stop when idle or interrupted.

Kept out of the CLI so that the verb only parses and prints. Ctrl-C ends the loop cleanly: the runs
are then finished (everything open decided) unless the user presses Ctrl-C a second time.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from ..errors import raise_all
from .events import EventKind
from .session import RunWatch
from .sweep import Sweep

Emit = Callable[..., None]
"""``emit(events, show=True)``: print the events (unless ``show`` is False) and pass them to hooks."""


@dataclass(kw_only=True)
class LoopConfig:
    """When to poll and when to stop."""

    every: float = 1.0
    """Seconds between polls (the alert latency is at most this plus parsing)."""
    until_idle: float | None = None
    """Stop once no file of any run has grown for this many seconds (None: run until Ctrl-C)."""
    stall_after: float = 600.0
    """Without ``until_idle``: say once per stall that a run stopped writing after this long."""

    def __post_init__(self) -> None:
        problems = []
        if not self.every > 0:
            problems.append(f"every must be > 0, got {self.every}")
        if self.until_idle is not None and not self.until_idle > 0:
            problems.append(f"until_idle must be > 0, got {self.until_idle}")
        if not self.stall_after > 0:
            problems.append(f"stall_after must be > 0, got {self.stall_after}")
        raise_all(problems)


def follow(source: RunWatch | Sweep, cfg: LoopConfig, emit: Emit) -> tuple[list[RunWatch], bool]:
    """Follow one run or a sweep until idle (``cfg.until_idle``) or Ctrl-C, then finish every run.

    Returns:
        The runs followed, and whether the user interrupted.
    """
    sweep = source if isinstance(source, Sweep) else None
    runs: list[RunWatch] = list(source.runs.values()) if isinstance(source, Sweep) else [source]
    limit = cfg.until_idle or cfg.stall_after
    interrupted = False
    try:
        while True:
            started = time.monotonic()
            if sweep is not None:
                lines, own = sweep.step()
                runs = list(sweep.runs.values())
                emit([e for e in own if e.kind is not EventKind.NOTICE], show=False)  # hooks only
                emit(lines)
            else:
                emit(source.step())
            for r in runs:
                if r.idle_seconds() >= limit:
                    emit(r.stall(), show=sweep is None)  # a sweep shows it on the run's state line
            if cfg.until_idle and all(r.stalled for r in runs):
                break
            time.sleep(max(0.0, cfg.every - (time.monotonic() - started)))
    except KeyboardInterrupt:
        interrupted = True
    for r in runs:
        try:
            emit(r.finish(), show=sweep is None)
        except KeyboardInterrupt:  # a second Ctrl-C: skip the final classification
            break
    if sweep is not None:
        emit(sweep.changed())
    return runs, interrupted


__all__ = ["LoopConfig", "follow"]
