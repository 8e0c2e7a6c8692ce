"""Heartbeat: notice a rank that stopped making progress and end it, so the launcher restarts the job.

A rank stuck in a collective (a peer died or skipped it, a NCCL/gloo deadlock, a filesystem that
stopped answering) waits until the collective timeout of its process group -- 10 minutes for NCCL,
30 by default for gloo -- or forever where no timeout applies. The heartbeat bounds that wait: the
training loop calls :meth:`Heartbeat.beat` once per step (one float store, no lock, no system call,
no device work), and a daemon thread wakes every ``check_every_s`` seconds and compares the time of
the last beat with ``timeout_s``. When the rank has been silent for longer, the thread logs an error
on this module's logger, writes every thread's Python stack to stderr (``faulthandler``, which
needs a real file, so not through logging), and ends the process with
:attr:`ExitCode.HANG` through ``os._exit`` -- the only exit that works while the main thread is
blocked inside C++. ``torchrun`` sees a failed worker, stops the others and restarts the job; the
restarted script resumes from the newest checkpoint.

Choosing the timeout: longer than the slowest legitimate gap between two beats -- the first step
(compilation, allocator warm-up), a synchronous checkpoint save, an evaluation -- and shorter than
the collective timeout, or the collective's own error ends the process first. Wrap known long
pauses in :meth:`Heartbeat.paused`. Detection latency is at most ``timeout_s + check_every_s``.
"""
from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from ..errors import ConfigError, raise_all
from .restart import ExitCode

__all__ = ["Heartbeat", "HeartbeatConfig"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class HeartbeatConfig:
    """How long a rank may go without progress before it is ended."""

    timeout_s: float = 600.0
    """Seconds without a :meth:`Heartbeat.beat` after which the process exits. Must exceed the
    slowest legitimate step (first step, synchronous save, evaluation) and should be below the
    process group's collective timeout."""
    check_every_s: float | None = None
    """How often the watchdog thread wakes, in seconds; None means ``timeout_s / 10``. The thread
    sleeps on an Event between checks: no work in the training loop's path."""
    exit_code: int = int(ExitCode.HANG)
    """Process exit code on a hang (:attr:`ExitCode.HANG` = 76 by default)."""

    def __post_init__(self) -> None:
        problems = []
        if not (isinstance(self.timeout_s, (int, float)) and self.timeout_s > 0):
            problems.append(f"timeout_s must be a number > 0, got {self.timeout_s!r}")
        if self.check_every_s is not None and not (isinstance(self.check_every_s, (int, float))
                                                   and self.check_every_s > 0):
            problems.append(f"check_every_s must be None or a number > 0, got {self.check_every_s!r}")
        if not (isinstance(self.exit_code, int) and 1 <= self.exit_code <= 125):
            problems.append(f"exit_code must be an int in 1..125 (not a shell or signal code), got {self.exit_code!r}")
        raise_all(problems, error=ConfigError, fix="fix the HeartbeatConfig fields")

    @property
    def interval(self) -> float:
        """Seconds between two checks of the watchdog thread."""
        return self.check_every_s if self.check_every_s is not None else self.timeout_s / 10


class Heartbeat:
    """A watchdog thread that ends this process when :meth:`beat` stops being called.

    Args:
        config: timeouts and exit code.
        rank: this process's rank, for the message.
        on_hang: called (in the watchdog thread) just before the process exits, e.g. to write a
            note beside the checkpoints; its exceptions are logged and ignored. Tests replace
            the exit with ``exit=`` instead.
        exit: the function that ends the process (``os._exit``); replaceable for tests.

    Use::

        with Heartbeat(HeartbeatConfig(timeout_s=300), rank=rank) as hb:
            for batch in loader:
                ...
                hb.beat()
    """

    def __init__(self, config: HeartbeatConfig | None = None, *, rank: int = 0,
                 on_hang: Callable[[float], None] | None = None,
                 exit: Callable[[int], None] = os._exit) -> None:
        self.config = config or HeartbeatConfig()
        self.rank = rank
        self._on_hang, self._exit = on_hang, exit
        self._last = time.monotonic()
        self._paused = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Set when the watchdog fired (only observable when ``exit`` does not end the process).
        self.fired = threading.Event()

    def beat(self) -> None:
        """Mark progress. One attribute store: safe to call every step, even every micro-batch."""
        self._last = time.monotonic()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Suspend the timeout for a known long operation (a first load, an evaluation)."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1
            self.beat()

    def start(self) -> "Heartbeat":
        """Start the watchdog thread (idempotent); returns self."""
        if self._thread is None:
            self.beat()
            self._thread = threading.Thread(target=self._watch, name="lossguard-heartbeat", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the watchdog thread (call before a normal exit or a long non-training phase)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None

    def __enter__(self) -> "Heartbeat":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _watch(self) -> None:
        cfg = self.config
        while not self._stop.wait(cfg.interval):
            silent = time.monotonic() - self._last
            if self._paused or silent <= cfg.timeout_s:
                continue
            _log.critical("lossguard heartbeat: rank %d made no progress for %.1f s (timeout %g s); exiting "
                          "with code %d for the launcher to restart the job. Stacks of every thread follow.",
                          self.rank, silent, cfg.timeout_s, cfg.exit_code)
            try:
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            except (OSError, ValueError):  # stderr closed or not a real file
                pass
            if self._on_hang is not None:
                try:
                    self._on_hang(silent)
                except Exception as exc:  # noqa: BLE001 - the exit must happen regardless
                    _log.error("lossguard heartbeat: on_hang failed: %r", exc)
            self.fired.set()
            self._exit(cfg.exit_code)
            return
