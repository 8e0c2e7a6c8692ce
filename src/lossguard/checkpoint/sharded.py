"""ShardedCheckpointStore: the CheckpointStore's guarantees for sharded (FSDP2 / DCP) checkpoints.

Every rank writes its own shards with ``torch.distributed.checkpoint`` (DCP) into one temporary
directory; rank 0 alone publishes it. Layout of one checkpoint::

    step-00000200/__0_0.distcp      rank 0's shards of model and optimizer (DCP)
    step-00000200/__1_0.distcp      rank 1's shards
    step-00000200/.metadata         DCP's index of every shard (written by the coordinator)
    step-00000200/rank-00000.pt     rank 0's own state: RNG, data position, scheduler, extras
    step-00000200/rank-00001.pt     rank 1's own state
    step-00000200/manifest.json     {"format": 2, "kind": "dcp", "step", "world_size", "files": {name: {size, crc32}}}

How a save is coordinated (:meth:`save`; :meth:`async_save` runs the same steps after the
in-memory copy, in a background thread on the store's own gloo process group):

1. every rank names the same temp directory ``.tmp-step-<step>-<rank 0's pid>-<n>`` without
   communicating (rank 0's pid is shared once, when the store is built; ``n`` counts saves, and
   every rank saves the same number of times);
2. DCP writes the shards and the coordinator writes ``.metadata`` (DCP fsyncs each file);
3. each rank writes its ``rank-NNNNN.pt``, computes the CRC-32 of its own files, and the file
   table is gathered on rank 0 (this gather is the barrier: rank 0 publishes only after every rank
   has finished writing);
4. rank 0 checksums the files nobody claimed (``.metadata``), writes the manifest, fsyncs and
   renames the directory into place, then prunes; the outcome is broadcast so every rank returns
   (or raises) together.

A kill at any moment leaves either a complete, checksummed checkpoint under its final name or a
``.tmp-*`` directory that the next store on rank 0 removes (its writer's pid is dead). Loading
verifies the CRC-32 of every file (spread over the ranks) and every rank agrees on the step, so a
damaged checkpoint is passed over on all ranks alike. The directory must be on a filesystem every
rank sees (as DCP's ``FileSystemWriter`` requires for loading on a different world size).
"""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import CheckpointError
from .files import Checksum, ChecksumMismatch, fast_checksum, file_crc
from .store import MANIFEST, CheckpointStore

__all__ = ["PendingSave", "ShardedCheckpointStore"]

SHARDED_FORMAT = 2
_RANK_FILE = "rank-{:05d}.pt"


def _dist():
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


_MISMATCH_TEXT = re.compile(r"\S+ (?:does not match its [\w-]+ in manifest\.json \(corrupted\)"
                            r"|has \d+ bytes, the manifest recorded \S+)")


def _default_stager():
    """The stager ``dcp.async_save`` uses when given only a checkpoint id. Given a writer, it stages
    through the writer instead (``FileSystemWriter``'s blocking full copy: 0.2 s and +200 MiB for a
    192 MiB checkpoint, against 0.08 s measured in benchmarks/checkpoint_dcp.py); None on a torch
    without ``DefaultStager``."""
    try:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    except ImportError:
        return None
    return DefaultStager(StagingOptions(False, False, False, False))


def _mismatch_in(exc: BaseException) -> str | None:
    """The message of a :class:`ChecksumMismatch` inside DCP's exception (its per-rank failures), or None."""
    if isinstance(exc, ChecksumMismatch):
        return str(exc)
    failures = getattr(exc, "failures", None) or {}
    for failure in failures.values():
        inner = failure[0] if isinstance(failure, tuple) else failure
        if isinstance(inner, ChecksumMismatch):
            return str(inner)
    # DCP folds some read errors (the .metadata read) into the text of another exception.
    found = _MISMATCH_TEXT.search(str(exc))
    return found.group(0) if found else None


class PendingSave:
    """An asynchronous save in flight. :meth:`wait` returns the published path (or raises)."""

    def __init__(self, step: int, thread: threading.Thread | None, box: dict) -> None:
        self.step, self._thread, self._box = step, thread, box

    @property
    def seconds(self) -> float | None:
        """Seconds from the save's call to its publication (None while in flight or after a failure)."""
        return self._box.get("seconds")

    def done(self) -> bool:
        """True once the checkpoint is published (or the save failed); never blocks."""
        return self._thread is None or not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> Path:
        """Block until published; returns its directory. Raises the save's error on every rank."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise CheckpointError(f"the asynchronous save of step {self.step} is still running after "
                                      f"{timeout} s", fix="wait longer, or check the filesystem")
        if "error" in self._box:
            raise self._box["error"]
        return self._box["path"]


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
        dist = _dist()
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
        self._algorithm = fast_checksum()  # CRC-32C when google-crc32c is installed, else CRC-32
        self._rank_bytes: dict[int, bytes] = {}  # rank files read (and verified) before a load
        if dist:  # at exit: finish an async save in flight, then destroy the groups (clean_exit.py)
            from ..distributed.clean_exit import track_store
            track_store(self)

    @property
    def asynchronous(self) -> bool:
        """True when the store was built with ``async_saves=True`` (the guard then saves with
        :meth:`async_save`, off the training path)."""
        return self._async_group is not None or (_dist() is None and self._async_wanted)

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
        dist = _dist()
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
        dist = _dist()
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
        # The rank's own state is serialised now: the RNG and data position of THIS moment.
        buf = io.BytesIO()
        torch.save(state["rank"], buf)
        rank_bytes = buf.getvalue()
        box: dict[str, Any] = {}
        from .dcp_io import hashing_writer  # torch-backed: imported where a save needs it

        writer = hashing_writer(tmp, self._algorithm)  # checksums computed while DCP writes
        if not asynchronous:
            try:
                dcp.save(state["sharded"], storage_writer=writer, no_dist=dist is None)
                box["path"] = self._finish(step, tmp, rank_bytes, None, writer.fs.table)
                box["seconds"] = time.perf_counter() - t0
            finally:
                self._in_flight.discard(name)
            return PendingSave(step, None, box)
        group = self._async_group
        stager = _default_stager()
        extra = {} if stager is None else {"async_stager": stager}
        future = dcp.async_save(state["sharded"], storage_writer=writer, process_group=group, no_dist=dist is None,
                                **extra)

        def finish() -> None:
            try:
                future.result()
                if stager is not None:
                    stager.close()
                box["path"] = self._finish(step, tmp, rank_bytes, group, writer.fs.table)
                box["seconds"] = time.perf_counter() - t0
            except BaseException as exc:  # noqa: BLE001 - handed to wait() on the training thread
                box["error"] = exc if isinstance(exc, CheckpointError) else CheckpointError(
                    f"asynchronous save of step {step} failed: {exc!r}", path=tmp,
                    fix="check the filesystem; older checkpoints are untouched")
            finally:
                self._in_flight.discard(name)

        thread = threading.Thread(target=finish, name=f"lossguard-save-{step}", daemon=True)
        thread.start()
        self._pending = PendingSave(step, thread, box)
        return self._pending

    def _finish(self, step: int, tmp: Path, rank_bytes: bytes, group, written: dict[str, Any]) -> Path:
        """Steps 3 and 4 of the module docstring; runs on every rank, returns the published path.
        ``written``: the checksums of the files this rank's DCP writer wrote (hashed on the way)."""
        dist = _dist()
        mine: dict[str, Any] = {}
        try:
            rank_file = _RANK_FILE.format(self.rank)
            crc = self._algorithm()
            crc.update(rank_bytes)
            with open(tmp / rank_file, "wb") as raw:
                raw.write(rank_bytes)
                raw.flush()
                os.fsync(raw.fileno())
            files = {rank_file: {"size": len(rank_bytes), crc.NAME: crc.hexdigest()}}
            files.update(written)
            mine = {"files": files}
        except OSError as exc:
            mine = {"error": f"rank {self.rank}: {exc}"}
        tables = [None] * self.world_size if self.rank == 0 else None
        if dist:
            dist.gather_object(mine, tables, dst=0, group=group)
        else:
            tables = [mine]
        outcome: list[Any] = [None]
        if self.rank == 0:
            outcome[0] = self._publish_gathered(step, tmp, tables)
        if dist:
            dist.broadcast_object_list(outcome, src=0, group=group)
        if isinstance(outcome[0], str):
            raise CheckpointError(f"sharded save of step {step} failed: {outcome[0]}", path=self.directory,
                                  fix="check the filesystem on every rank; older checkpoints are untouched")
        return self.path_of(step)

    def _publish_gathered(self, step: int, tmp: Path, tables: list[dict]) -> str | None:
        """Rank 0: write the manifest from every rank's file table and rename; an error string on failure."""
        try:
            errors = [t["error"] for t in tables if "error" in t]
            if errors:
                raise OSError("; ".join(errors))
            files: dict[str, Any] = {}
            for table in tables:
                files.update(table["files"])
            for entry in sorted(tmp.iterdir()):  # .metadata and anything else DCP wrote
                if entry.is_file() and entry.name not in files:
                    files[entry.name] = {"size": entry.stat().st_size, Checksum.NAME: file_crc(entry)}
            manifest = {"format": SHARDED_FORMAT, "kind": "dcp", "step": step, "world_size": self.world_size,
                        "created": time.time(), "files": files}
            with open(tmp / MANIFEST, "w") as fh:
                json.dump(manifest, fh, indent=1)
                fh.flush()
                os.fsync(fh.fileno())
            self._publish(tmp, step)  # fsyncs the directory, renames, fsyncs the parent
            self._recover()
            self.prune()
            return None
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            return str(exc)

    def agreed_steps(self) -> list[int]:
        """Rank 0's list of valid checkpoint steps, the same on every rank (a collective)."""
        listing: list[Any] = [self.steps() if self.rank == 0 else None]
        dist = _dist()
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
        dist = _dist()
        listing: list[Any] = [None]
        if self.rank == 0:
            valid = self.steps()
            if step is None:
                listing[0] = list(reversed(valid))
            elif int(step) in valid:
                listing[0] = [int(step)]
            else:
                reason = next((i.reason for i in self.list() if i.step == int(step)), "it does not exist")
                listing[0] = f"checkpoint of step {step} is not loadable ({reason}; valid: {valid})"
        if dist:
            dist.broadcast_object_list(listing, src=0)
        if isinstance(listing[0], str):
            raise CheckpointError(listing[0], path=self.directory, fix="pick a valid step, or None for the newest")
        damaged = []
        for candidate in listing[0]:
            problem = self._verify_share(candidate, verify)
            problems = [None] * self.world_size
            if dist:
                dist.all_gather_object(problems, problem)
            else:
                problems = [problem]
            problems = [p for p in problems if p]
            if not problems:
                try:
                    return self._load_verified(candidate, template, verify)
                except ChecksumMismatch as exc:  # every rank: DCP gathers the read errors of all ranks
                    problems = [str(exc)]
            damaged.append(f"step {candidate}: {problems[0]}")
            if step is None:
                import warnings

                warnings.warn(f"{self.path_of(candidate)}: {problems[0]}; trying an older checkpoint", stacklevel=2)
        raise CheckpointError("no sharded checkpoint verifies" + (f" ({'; '.join(damaged)})" if damaged else ""),
                              path=self.directory, fix="start from scratch or point to the right directory")

    def _verify_share(self, step: int, checksum: bool) -> str | None:
        """This rank's part of the verification of ``step``: an error string or None."""
        path = self.path_of(step)
        try:
            manifest = json.loads((path / MANIFEST).read_text())
        except (OSError, ValueError) as exc:
            return f"{MANIFEST} unreadable on rank {self.rank} ({exc})"
        if manifest.get("format") != SHARDED_FORMAT:
            return "not a sharded checkpoint (use CheckpointStore for whole-model ones)"
        if manifest.get("world_size") != self.world_size:
            return (f"saved by {manifest.get('world_size')} ranks, this run has {self.world_size} (the per-rank "
                    "RNG and data position do not map onto a different world size)")
        for k, (name, expected) in enumerate(sorted(manifest["files"].items())):
            if k % self.world_size != self.rank:
                continue
            try:
                size = (path / name).stat().st_size
            except OSError:
                return f"{name} is missing"
            if size != expected.get("size"):
                return f"{name} has {size} bytes, the manifest recorded {expected.get('size')}"
        if checksum:  # this rank's own small file, read once here and kept for the load
            from .dcp_io import read_verified

            name = _RANK_FILE.format(self.rank)
            try:
                self._rank_bytes[step] = read_verified(path / name, manifest["files"].get(name, {}))
            except (OSError, ChecksumMismatch) as exc:
                return str(exc)
        return None

    def _load_verified(self, step: int, template: dict[str, Any], verify: bool = True) -> dict[str, Any]:
        """DCP-load ``step`` into the template, each file's checksum verified as DCP reads it.

        Raises:
            ChecksumMismatch: a file DCP read is damaged (on every rank: DCP gathers read errors).
        """
        import torch
        import torch.distributed.checkpoint as dcp

        path = self.path_of(step)
        source: dict[str, Any] = {"checkpoint_id": path}
        if verify:
            from .dcp_io import verifying_reader

            files = json.loads((path / MANIFEST).read_text())["files"]
            source = {"storage_reader": verifying_reader(path, files)}
        from torch.distributed.checkpoint.api import CheckpointException

        try:
            dcp.load(template["sharded"], no_dist=_dist() is None, **source)
        except (Exception, CheckpointException) as exc:  # CheckpointException is a BaseException
            mismatch = _mismatch_in(exc)
            if mismatch is not None:
                raise ChecksumMismatch(mismatch) from exc
            raise CheckpointError(f"DCP load failed: {str(exc).splitlines()[0]}", path=path,
                                  fix="the checkpoint does not match this model/optimizer; use the same "
                                      "configuration as the run that saved it") from exc
        raw = self._rank_bytes.pop(step, None)
        if raw is None:
            raw = (path / _RANK_FILE.format(self.rank)).read_bytes()
        self._rank_bytes.clear()
        rank_state = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=False)
        return {"format": SHARDED_FORMAT, "step": step, "sharded": template["sharded"], "rank": rank_state}
