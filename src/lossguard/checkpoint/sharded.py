"""ShardedCheckpointStore: the CheckpointStore's guarantees for sharded (FSDP2 / DCP) checkpoints.

Every rank writes its own shards with ``torch.distributed.checkpoint`` (DCP) into one temporary
directory; rank 0 alone publishes it. Layout of one checkpoint::

    step-00000200/__0_0.distcp      rank 0's shards of model and optimizer, and its own state (DCP)
    step-00000200/__1_0.distcp      rank 1's shards and own state
    step-00000200/.metadata         DCP's index of every item (written by the coordinator)
    step-00000200/manifest.json     {"format": 2, "kind": "dcp", "step", "world_size",
                                     "files": {name: {size, crc32, marks}}}

A rank's own state (RNG, data position, scheduler, extras) is one DCP item of its shard file, under
the key ``lossguard_rank_NNNNN``; checkpoints of an older lossguard keep it in ``rank-NNNNN.pt``
beside the shards, and still load.

How a save is coordinated (:meth:`save`; :meth:`async_save` runs the same steps after the
in-memory copy, in a background thread on the store's own gloo process group):

1. every rank names the same temp directory ``.tmp-step-<step>-<rank 0's pid>-<n>`` without
   communicating (rank 0's pid is shared once, when the store is built; ``n`` counts saves, and
   every rank saves the same number of times);
2. DCP writes the shards (each file hashed on its way to disk and fsynced by DCP) and the
   coordinator writes ``.metadata``;
3. inside DCP's own ``finish`` step, rank 0 receives every rank's file table with DCP's gathered
   write results, writes the manifest and renames the directory into place; DCP's broadcast of the
   outcome returns (or raises) on every rank together (:mod:`.sharded_writer`, :mod:`.sharded_publish`).
   No collective of the store's own.

A kill at any moment leaves either a complete, checksummed checkpoint under its final name, a
``.tmp-*`` directory that the next store on rank 0 removes (its writer's pid is dead), or -- on a
power loss in the instant between the rename and its fsync -- a directory whose manifest is
missing or empty, which no listing or load takes for valid. Loading
verifies the CRC-32 of every file (spread over the ranks) and every rank agrees on the step, so a
damaged checkpoint is passed over on all ranks alike. The directory must be on a filesystem every
rank sees (as DCP's ``FileSystemWriter`` requires for loading on a different world size). Loading:
:mod:`.sharded_load`; an async save in flight: :class:`PendingSave` (:mod:`.pending_save`).
"""
from __future__ import annotations

import io
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import CheckpointError
from .files import ChecksumMismatch, fast_checksum
from .pending_save import PendingSave
from .sharded_layout import SHARDED_FORMAT, active_dist, rank_key
from .sharded_load import agreed_candidates, load_verified
from .sharded_publish import default_stager, failure_text, publish_files
from .store import CheckpointStore

__all__ = ["PendingSave", "SHARDED_FORMAT", "ShardedCheckpointStore"]


class ShardedCheckpointStore(CheckpointStore):
    """Atomic, checksummed, pruned checkpoints of a sharded run, written with DCP by every rank.

    Build it on every rank with the same arguments (it runs one collective). Retention
    (``keep_last``, ``keep_every``, ``min_keep_steps_back``, :meth:`protect`) works as in
    :class:`CheckpointStore`; rank 0 applies it, so call :meth:`protect` on every rank (it is
    local bookkeeping) and it takes effect on rank 0.

    Args:
        directory: the checkpoint directory, on a filesystem all ranks share.
        keep_last, keep_every, min_keep_steps_back: as :class:`CheckpointStore`.
        async_saves: create the store's own gloo process group so :meth:`async_save` can run its
            collectives in a background thread without meeting the training's collectives (a
            collective call, so every rank must pass the same value).
    """

    sharded = True
    """Marker: checkpoints are DCP shards loaded into a template (the guard builds a ShardedTrainState)."""

    def __init__(self, directory: str | os.PathLike, *, keep_last: int = 3, keep_every: int | None = None,
                 min_keep_steps_back: int | None = None, async_saves: bool = False) -> None:
        dist = active_dist()
        self.rank = dist.get_rank() if dist else 0
        self.world_size = dist.get_world_size() if dist else 1
        self._in_flight: set[str] = set()
        self._deleting: list[threading.Thread] = []  # pruned checkpoints being deleted (_discard)
        super().__init__(directory, keep_last=keep_last, keep_every=keep_every,
                         min_keep_steps_back=min_keep_steps_back)  # rank 0 recovers leftovers
        owner = [os.getpid()]
        if dist:
            dist.broadcast_object_list(owner, src=0)
        self._owner_pid = int(owner[0])
        self._async_group = dist.new_group(backend="gloo") if (dist and async_saves) else None
        self._async_wanted = bool(async_saves)
        self._pending: PendingSave | None = None
        # Counts saves, the same on every rank (every rank saves together); the base class's
        # _counter also counts rank 0's renames during pruning, so it cannot name temp dirs.
        self._saves = 0
        self._algorithm = fast_checksum()  # CRC-32 with zlib-ng, else CRC-32C, else zlib's CRC-32
        if dist:  # at exit: finish an async save in flight, then destroy the groups (clean_exit.py)
            from ..distributed.clean_exit import track_store
            track_store(self)

    @property
    def asynchronous(self) -> bool:
        """True when the store was built with ``async_saves=True`` (the guard then saves with
        :meth:`async_save`, off the training path)."""
        return self._async_group is not None or (active_dist() is None and self._async_wanted)

    # ------------------------------------------------------------------ rank-0 housekeeping
    def _recover(self) -> None:
        if self.rank == 0:  # one janitor: rank 0, whose pid names every temp dir of this job
            super()._recover()

    def prune(self) -> list[int]:
        """Rank 0 deletes what retention does not keep; other ranks do nothing and return []."""
        return super().prune() if self.rank == 0 else []

    def supersede_after(self, step: int) -> list[int]:
        """Remove every checkpoint newer than ``step`` (see :meth:`CheckpointStore.supersede_after`),
        on every rank together: an asynchronous save in flight is waited for first (it could
        publish an abandoned step after the removal), rank 0 removes, and the outcome is broadcast
        so no rank lists the directory before the removal is done. Returns the removed steps."""
        self.wait()
        removed: list[Any] = [super().supersede_after(step) if self.rank == 0 else None]
        dist = active_dist()
        if dist:
            dist.broadcast_object_list(removed, src=0)
        return list(removed[0])

    # ------------------------------------------------------------------ save
    def save(self, step: int, state: dict[str, Any]) -> Path:
        """Write a sharded checkpoint of ``step`` on every rank, atomically; returns its directory.

        Args:
            step: optimizer steps taken so far (>= 0); the same on every rank.
            state: ``{"sharded": DCP state dict (e.g. from get_state_dict), "rank": this rank's own
                state (anything torch.save accepts)}``, as
                :meth:`lossguard.checkpoint.ShardedTrainState.state_dict` returns.
        """
        return self._start(step, state, asynchronous=False).wait()

    def async_save(self, step: int, state: dict[str, Any]) -> PendingSave:
        """Start a save and return once the state is copied to host memory; the write, the
        checksums and the publication run in a background thread on the store's own gloo group.

        Only one save is in flight: a new save (sync or async) first waits for the previous one.
        Requires ``async_saves=True`` when the store was built under torch.distributed.
        """
        return self._start(step, state, asynchronous=True)

    def wait(self) -> Path | None:
        """Wait for the asynchronous save in flight, if any, and for pruned checkpoints still being
        deleted; returns the save's path."""
        pending, self._pending = self._pending, None
        try:
            return pending.wait() if pending is not None else None
        finally:
            for thread in self._deleting:
                thread.join()
            self._deleting = []

    def _discard(self, path: Path, kind: str) -> None:
        """As :meth:`CheckpointStore._discard`, but a pruned checkpoint is deleted in a background
        thread after its (atomic) rename: deleting hundreds of MiB cost a sync save ~15% of its
        time (profiled, issue 23). A ``.trash-*`` left by a killed process is removed by the next
        store's ``_recover``; :meth:`wait` (every save, load and exit) joins the deletions."""
        if kind != "trash":
            return super()._discard(path, kind)
        self._counter += 1
        side = self.directory / f".trash-{path.name}-{os.getpid()}-{self._counter}"
        os.rename(path, side)
        thread = threading.Thread(target=shutil.rmtree, args=(side,), kwargs={"ignore_errors": True},
                                  name="lossguard-prune", daemon=True)
        thread.start()
        self._deleting.append(thread)

    def _start(self, step: int, state: dict[str, Any], *, asynchronous: bool) -> PendingSave:
        import torch
        import torch.distributed.checkpoint as dcp

        if not isinstance(step, int) or step < 0:
            raise CheckpointError(f"checkpoint step must be an int >= 0, got {step!r}", path=self.directory,
                                  fix="pass the number of optimizer steps taken so far")
        if not isinstance(state, dict) or "sharded" not in state or "rank" not in state:
            raise CheckpointError("a sharded checkpoint needs {'sharded': ..., 'rank': ...}",
                                  fix="pass ShardedTrainState.state_dict()")
        dist = active_dist()
        if asynchronous and dist and self._async_group is None:
            raise CheckpointError("async_save needs the store built with async_saves=True",
                                  path=self.directory, fix="ShardedCheckpointStore(..., async_saves=True)")
        self.wait()
        self._saves += 1
        name = f".tmp-step-{step:08d}-{self._owner_pid}-{self._saves}"
        tmp = self.directory / name
        # In flight before rank 0's housekeeping: another rank may already have made this temp dir
        # (it carries rank 0's pid, which _recover takes for a leftover of rank 0's own).
        self._in_flight.add(name)
        self._recover()
        tmp.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        # The rank's own state is serialised now: the RNG and data position of THIS moment. It goes
        # into this rank's shard file as one DCP item (no file, fsync or collective of its own).
        buf = io.BytesIO()
        torch.save(state["rank"], buf)
        sharded = dict(state["sharded"])
        sharded[rank_key(self.rank)] = buf.getvalue()
        box: dict[str, Any] = {}
        from .sharded_writer import PublishingWriter  # torch-backed: imported where a save needs it

        def publish(files: dict[str, Any]) -> None:  # rank 0, inside DCP's finish (every rank waits)
            publish_files(self, step, tmp, files)

        writer = PublishingWriter(tmp, self._algorithm, publish)  # checksums computed while DCP writes

        def settle(run) -> None:
            try:
                run()
                box["path"] = self.path_of(step)
                box["seconds"] = time.perf_counter() - t0
            except BaseException as exc:  # noqa: BLE001 - DCP raises the same failure on every rank
                if self.rank == 0:
                    shutil.rmtree(tmp, ignore_errors=True)  # every rank is past its writes
                error = CheckpointError(f"sharded save of step {step} failed: {failure_text(exc)}",
                                        path=self.directory,
                                        fix="check the filesystem on every rank; older checkpoints are untouched")
                error.__cause__ = exc
                box["error"] = error
            finally:
                self._in_flight.discard(name)

        if not asynchronous:
            settle(lambda: dcp.save(sharded, storage_writer=writer, no_dist=dist is None))
            if "error" in box:
                raise box["error"]
            return PendingSave(step, None, box)
        group = self._async_group
        stager = default_stager()
        extra = {} if stager is None else {"async_stager": stager}
        try:
            future: Any = dcp.async_save(sharded, storage_writer=writer, process_group=group,
                                         no_dist=dist is None, **extra)
        except BaseException:
            self._in_flight.discard(name)
            raise

        def finish() -> None:
            future.result()
            if stager is not None:
                stager.close()

        thread = threading.Thread(target=settle, args=(finish,), name=f"lossguard-save-{step}", daemon=True)
        thread.start()
        self._pending = PendingSave(step, thread, box)
        return self._pending

    def agreed_steps(self) -> list[int]:
        """Rank 0's list of valid checkpoint steps, the same on every rank (a collective)."""
        listing: list[Any] = [self.steps() if self.rank == 0 else None]
        dist = active_dist()
        if dist:
            dist.broadcast_object_list(listing, src=0)
        return list(listing[0])

    # ------------------------------------------------------------------ load
    def load(self, step: int | None = None, *, template: dict[str, Any] | None = None, verify: bool = True,
             **_ignored) -> dict[str, Any]:
        """Load a sharded checkpoint on every rank, into ``template`` (DCP loads in place).

        Args:
            step: the step to load; None: the newest checkpoint that verifies on every rank.
            template: ``ShardedTrainState.state_dict()`` of this run: its ``"sharded"`` tensors are
                filled in place; its ``"rank"`` part is replaced by this rank's saved one.
            verify: check every file's checksum as DCP reads it (:mod:`.dcp_io`: one read of each
                file); False checks sizes only (DCP still fails on a truncated shard).

        Returns:
            ``{"format", "step", "sharded": template["sharded"], "rank": saved rank state}``.
        """
        self.wait()  # an asynchronous save in flight may still prune or publish
        if template is None or "sharded" not in template:
            raise CheckpointError("a sharded checkpoint loads into a template state dict",
                                  fix="call ShardedTrainState.restore(store), or pass template=state.state_dict()")
        # An explicit step (a rollback's target) needs no listing of the directory: every rank checks
        # its share of that checkpoint below, and rank 0's listing only explains a failure.
        candidates = [int(step)] if step is not None else agreed_candidates(self, None)
        damaged = []
        for candidate in candidates:
            try:  # every rank checks its share inside DCP's planning: all pass over damage together
                return load_verified(self.path_of(candidate), candidate, template, rank=self.rank,
                                     world_size=self.world_size, verify=verify)
            except ChecksumMismatch as exc:
                problem = str(exc)
            if step is not None:
                agreed_candidates(self, int(step))  # raises "not loadable" when rank 0 does not list it as valid
            damaged.append(f"step {candidate}: {problem}")
            if step is None:
                import warnings

                warnings.warn(f"{self.path_of(candidate)}: {problem}; trying an older checkpoint", stacklevel=2)
        raise CheckpointError("no sharded checkpoint verifies" + (f" ({'; '.join(damaged)})" if damaged else ""),
                              path=self.directory, fix="start from scratch or point to the right directory")
