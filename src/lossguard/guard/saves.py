"""The guard's checkpoint saves and loads, each timed in the log, with at most one async save in flight.

A sharded store with its own gloo group saves asynchronously (:meth:`async_save` returns a
:class:`lossguard.checkpoint.PendingSave`); the guard then logs the save's completion when it sees
it done -- at a later step, at the next save, or at close -- and never blocks a step for it.
"""
from __future__ import annotations

import time
from typing import Any

from .events import EventLog


class GuardSaves:
    """Saves and loads the guard's TrainState through its store, with timing records.

    Args:
        store: the checkpoint store (a :class:`CheckpointStore` or a sharded one).
        state: the TrainState (or ShardedTrainState) saved and loaded.
        snapshot: a :class:`lossguard.checkpoint.HostSnapshot` that takes a host copy at each save, or None.
        log: the event log the timing records go to.
    """

    def __init__(self, store: Any, state: Any, snapshot: Any, log: EventLog) -> None:
        self.store, self.state, self.snapshot, self.log = store, state, snapshot, log
        self.inflight: Any = None
        """The asynchronous save whose completion is not logged yet (None: none)."""

    def save(self, step: int) -> Any:
        """Save the state as checkpoint ``step`` (and a host snapshot); returns the store's answer
        (a path, or a PendingSave for an asynchronous store)."""
        self.poll()  # a previous async save finished: log it before the next one starts
        t0 = time.perf_counter()
        if self.snapshot is not None:
            self.snapshot.take()  # the same state, kept in host memory for a fast rollback
        asynchronous = getattr(self.store, "asynchronous", False)  # a sharded store with its own gloo group
        if asynchronous:
            self.poll(wait=True)  # one save in flight (the store would wait for it anyway)
            out = self.inflight = self.store.async_save(step, self.state.state_dict())
        else:
            out = self.store.save(step, self.state.state_dict())
        self.log.timing({"step": step, "event": "checkpoint_save", "mode": "async" if asynchronous else "sync",
                         "seconds": round(time.perf_counter() - t0, 6), "snapshot": self.snapshot is not None})
        return out

    def poll(self, *, wait: bool = False) -> None:
        """Log the completion of the asynchronous save in flight once it is done (``wait``: block
        for it); never blocks unless asked."""
        pending = self.inflight
        if pending is None or not (wait or pending.done()):
            return
        self.inflight = None
        rec = {"step": pending.step, "event": "checkpoint_saved", "mode": "async"}
        try:
            pending.wait()
            rec["seconds"] = round(pending.seconds, 6)
        except Exception as exc:  # noqa: BLE001 - logged here, raised by the store's next wait()
            rec["error"] = str(exc).splitlines()[0]
        self.log.timing(rec)

    def resume(self, step: int | None, executor: Any) -> None:
        """Load checkpoint ``step``; with None, first finish a rollback a previous process booked in
        the ledger's ``resume_from`` (its newer checkpoints removed, its target loaded, the timeline
        reset as a rollback leaves it, and only then ``resume_from`` cleared), else load the newest.
        Every rank calls it; a crash at any moment of a rollback, or of this resume, resumes on the
        new timeline.

        Args:
            step: the checkpoint to load, or None.
            executor: the guard's :class:`RecoveryExecutor` (it finishes the booked rollback).
        """
        ledger = executor.ledger
        pending = ledger.resume_from if step is None else None
        if pending is not None:
            step = pending
            executor.abandon_newer(pending)
        self.load(step)
        if pending is not None:
            executor.after_restore(pending)
            ledger.resume_from = None
            ledger.save()

    def load(self, step: int | None) -> None:
        """Restore the state from checkpoint ``step`` (None: the newest valid) and log the time."""
        t0 = time.perf_counter()
        self.state.restore(self.store, step)  # a sharded state loads into its own template (DCP)
        self.log.timing({"step": self.state.step, "event": "checkpoint_load", "source": "disk",
                         "seconds": round(time.perf_counter() - t0, 6)})
