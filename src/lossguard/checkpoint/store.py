"""CheckpointStore: atomic, self-validating checkpoints in one directory, pruned safely.

Layout of the directory::

    step-00000200/state.pt        the torch.save payload
    step-00000200/manifest.json   {"format", "step", "created", "files": {"state.pt": {size, crc32}}}
    .tmp-step-00000200-<pid>-<n>/ a checkpoint being written (never read; removed once its writer is dead)

A checkpoint is written into a ``.tmp-*`` directory in the same directory, every file is fsynced,
the directory is fsynced, then it is renamed to its final name (rename is atomic on POSIX) and the
parent is fsynced. A process killed at any moment therefore leaves either the complete checkpoint
under its final name or nothing under that name; the manifest's size and CRC-32 additionally catch
a payload damaged after the fact (disk, copy, truncation). Only rank 0 should write under
torch.distributed. The parts: :mod:`.manifest` (what a valid checkpoint lists), :mod:`.payload`
(``torch.save`` / ``torch.load``), :mod:`.retention` (what pruning keeps).
"""
from __future__ import annotations

import builtins  # the method list() hides the builtin inside the class
import os
import shutil
import time
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, ConfigError, raise_all
from .files import CheckpointInfo, Checksum, fsync_dir, pid_alive
from .manifest import FORMAT, PAYLOAD, inspect_checkpoint, write_manifest
from .names import STORE_NAME, STORE_SIDE, store_name
from .payload import load_payload, write_payload
from .retention import kept_steps, retention_problems

__all__ = ["CheckpointInfo", "CheckpointStore"]

_NAME, _SIDE = STORE_NAME, STORE_SIDE  # the store's own names (checkpoint/names.py)


class CheckpointStore:
    """Atomic checkpoints of a training run, one directory per step, pruned without losing the
    ones a rollback needs.

    Args:
        directory: where checkpoints live; created if missing.
        keep_last: how many of the newest valid checkpoints pruning keeps (>= 1).
        keep_every: also keep every checkpoint whose step is a multiple of this (None: none).
        min_keep_steps_back: keep every checkpoint newer than ``newest - N`` plus the newest one at
            or before ``newest - N``, so a rollback "at least N steps before a spike" that starts
            after the newest checkpoint always finds its target. None: no such guarantee.
    """

    def __init__(self, directory: str | os.PathLike, *, keep_last: int = 3, keep_every: int | None = None,
                 min_keep_steps_back: int | None = None) -> None:
        problems = retention_problems(keep_last, keep_every, min_keep_steps_back)
        raise_all(problems, error=ConfigError, fix="fix the CheckpointStore arguments")
        self.directory = Path(directory)
        self.keep_last, self.keep_every, self.min_keep_steps_back = keep_last, keep_every, min_keep_steps_back
        self._protected: set[int] = set()
        self._counter = 0
        #: Names of side directories this process is still writing (asynchronous saves of
        #: subclasses); :meth:`_recover` leaves them alone.
        self._in_flight: set[str] = getattr(self, "_in_flight", set())
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(f"cannot create the checkpoint directory ({exc.strerror})", path=self.directory,
                                  fix="choose a writable directory") from exc
        self._recover()

    # ------------------------------------------------------------------ paths and listing
    sharded = False
    """One ``torch.save`` payload per step (:class:`~lossguard.checkpoint.protocol.GuardStore`)."""

    @property
    def asynchronous(self) -> bool:
        """False: saves are synchronous (:class:`~lossguard.checkpoint.protocol.GuardStore`)."""
        return False

    def agreed_steps(self) -> list[int]:
        """:meth:`steps`: every rank keeps its own store, so its own listing is the agreed one."""
        return self.steps()

    def wait(self) -> Path | None:
        """Nothing to wait for: every save is synchronous (returns None, as a sharded store with no
        save in flight does)."""
        return None

    def path_of(self, step: int) -> Path:
        """The directory a checkpoint of ``step`` has (whether or not it exists)."""
        return self.directory / store_name(step)

    def _inspect(self, step: int, path: Path, *, checksum: bool) -> CheckpointInfo:
        return inspect_checkpoint(step, path, checksum=checksum, protected=step in self._protected)

    def list(self, *, checksum: bool = False) -> list[CheckpointInfo]:
        """Every checkpoint directory, oldest first, with its validity.

        Args:
            checksum: also verify each payload's CRC-32 (reads every byte); without it only the
                manifest and the payload size are checked.
        """
        found = []
        for entry in self.directory.iterdir():
            match = _NAME.match(entry.name)
            if match and entry.is_dir():
                found.append(self._inspect(int(match.group(1)), entry, checksum=checksum))
        return sorted(found, key=lambda info: info.step)

    def steps(self) -> builtins.list[int]:
        """Steps of the valid checkpoints (manifest and size checked), oldest first."""
        return [info.step for info in self.list() if info.valid]

    def newest_at_or_before(self, step: int) -> int | None:
        """The newest valid checkpoint step ``<= step``, or None when there is none."""
        older = [s for s in self.steps() if s <= step]
        return older[-1] if older else None

    def validate(self) -> builtins.list[CheckpointInfo]:
        """Check every checkpoint fully (manifest, size, CRC-32); returns the full listing."""
        return self.list(checksum=True)

    # ------------------------------------------------------------------ protection and pruning
    def protect(self, step: int) -> None:
        """Never prune the checkpoint of ``step`` (e.g. the rollback target of an open episode)."""
        self._protected.add(int(step))

    def unprotect(self, step: int) -> None:
        """Let pruning consider ``step`` again."""
        self._protected.discard(int(step))

    def _keep(self, steps: builtins.list[int]) -> set[int]:
        return kept_steps(steps, keep_last=self.keep_last, keep_every=self.keep_every,
                          min_keep_steps_back=self.min_keep_steps_back, protected=self._protected)

    def prune(self) -> builtins.list[int]:
        """Delete valid checkpoints the retention rules do not keep; returns the deleted steps.

        The newest valid checkpoint is always kept; invalid ones are left for the user to inspect
        (``validate()`` reports them).
        """
        # The rules keep every step of a set whenever they keep every step of a superset of it (a
        # step among the newest k, past the horizon or the newest before it, stays so when steps
        # are removed), so when they would keep every checkpoint *name* there is nothing to delete
        # and no manifest to read: the common case, a save before the store holds keep_last ones.
        named = sorted(int(m.group(1)) for m in map(_NAME.match, os.listdir(self.directory)) if m)
        if set(named) <= self._keep(named):
            return []
        steps = self.steps()
        deleted = []
        for step in sorted(set(steps) - self._keep(steps)):
            self._discard(self.path_of(step), "trash")
            deleted.append(step)
        return deleted

    def supersede_after(self, step: int) -> builtins.list[int]:
        """Remove every checkpoint newer than ``step`` (valid or damaged): a rollback to ``step``
        abandoned the timeline they belong to, so :meth:`load` must never find them again.

        Each one is renamed aside first (one atomic rename, so no half-removed directory keeps a
        checkpoint's name), newest first, so a kill midway leaves a prefix of the old timeline that
        the rollback's ``ledger.resume_from`` still overrides; calling it again finishes the job.

        Returns:
            The removed steps, newest first.
        """
        removed: builtins.list[int] = []
        for info in reversed(self.list()):
            if info.step > int(step):
                self._discard(info.path, "trash")
                removed.append(info.step)
        if removed:
            fsync_dir(self.directory)
        return removed

    def _discard(self, path: Path, kind: str) -> None:
        # Rename first so a half-deleted directory never carries a checkpoint's name.
        self._counter += 1
        match = _NAME.match(path.name)
        step = match.group(1) if match else path.name
        side = self.directory / f".{kind}-step-{step}-{os.getpid()}-{self._counter}"
        os.rename(path, side)
        if kind == "trash":
            shutil.rmtree(side, ignore_errors=True)

    def _recover(self) -> None:
        """Finish what killed writers left: drop their temp dirs, put back an overwritten original."""
        for entry in list(self.directory.iterdir()):
            match = _SIDE.match(entry.name)
            if not match or entry.name in self._in_flight:
                continue
            pid = int(match.group(3))
            # Saves are synchronous, so our own side directories are leftovers too; another live
            # process's are its work in progress.
            if pid != os.getpid() and pid_alive(pid):
                continue
            kind, step = match.group(1), int(match.group(2))
            if kind == "old" and not self.path_of(step).exists():
                os.rename(entry, self.path_of(step))  # killed between the two renames of an overwrite
            else:
                shutil.rmtree(entry, ignore_errors=True)

    # ------------------------------------------------------------------ save and load
    def _write_payload(self, path: Path, state: dict) -> tuple[int, str]:
        """Write ``state`` to ``path`` with torch.save, fsync it; returns (size, CRC-32 hex).

        A separate method so tests can slow it down and kill the process in the middle of a write.
        """
        return write_payload(path, state)

    def save(self, step: int, state: dict[str, Any]) -> Path:
        """Write ``state`` as the checkpoint of ``step`` atomically, then prune.

        An existing checkpoint of the same step (a run that rolled back and came past it again) is
        replaced atomically too.

        Args:
            step: the training step the state was taken after (>= 0).
            state: anything ``torch.save`` accepts; usually ``TrainState.state_dict()``.

        Returns:
            The checkpoint's directory.
        """
        if not isinstance(step, int) or step < 0:
            raise CheckpointError(f"checkpoint step must be an int >= 0, got {step!r}", path=self.directory,
                                  fix="pass the number of optimizer steps taken so far")
        self._recover()
        self._counter += 1
        tmp = self.directory / f".tmp-step-{step:08d}-{os.getpid()}-{self._counter}"
        tmp.mkdir()
        try:
            size, crc = self._write_payload(tmp / PAYLOAD, state)
            manifest = {"format": FORMAT, "step": step, "created": time.time(),
                        "files": {PAYLOAD: {"size": size, Checksum.NAME: crc}}}
            write_manifest(tmp, manifest)
            final = self._publish(tmp, step)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._recover()  # removes the ".old" copy of an overwritten checkpoint
        self.prune()
        return final

    def _publish(self, tmp: Path, step: int) -> Path:
        """Make the complete temp directory ``tmp`` the checkpoint of ``step``: fsync, rename, fsync.

        An existing checkpoint of that step is first renamed aside (``.old-*``), so a kill between
        the two renames leaves the original for :meth:`_recover` to put back.
        """
        fsync_dir(tmp)
        final = self.path_of(step)
        if final.exists():
            self._discard(final, "old")
        os.rename(tmp, final)
        fsync_dir(self.directory)
        return final

    def load(self, step: int | None = None, *, map_location: Any = "cpu", weights_only: bool | None = None) -> dict:
        """Load a checkpoint after verifying its size and CRC-32.

        Args:
            step: the step to load; None loads the newest checkpoint that verifies, passing over
                damaged newer ones.
            map_location: passed to ``torch.load``.
            weights_only: True only unpickles tensors and plain containers (safe for untrusted
                files); False unpickles anything; None (default) tries True and falls back to False
                for payloads holding other objects (this store wrote them; the checksum matched).

        Raises:
            CheckpointError: no valid checkpoint, the requested one is missing or damaged, or it
                cannot be unpickled.
        """
        if step is None:
            infos = [i for i in self.list() if i.valid]
            if not infos:
                damaged = [f"{i.path.name}: {i.reason}" for i in self.list()]
                raise CheckpointError("no valid checkpoint" + (f" (damaged: {'; '.join(damaged)})" if damaged else ""),
                                      path=self.directory, fix="start from scratch or point to the right directory")
            for info in reversed(infos):
                full = self._inspect(info.step, info.path, checksum=True)
                if full.valid:
                    return load_payload(full.path / PAYLOAD, map_location, weights_only)
                import warnings

                warnings.warn(f"{full.path}: {full.reason}; loading an older checkpoint", stacklevel=2)
            raise CheckpointError("every checkpoint failed its CRC-32 check", path=self.directory,
                                  fix="restore the directory from a backup or start from scratch")
        info = self._inspect(int(step), self.path_of(step), checksum=True)
        if not info.path.exists():
            raise CheckpointError(f"no checkpoint of step {step} (valid: {self.steps()})", path=self.directory,
                                  fix="pick one of the valid steps, or load(None) for the newest")
        if not info.valid:
            raise CheckpointError(info.reason, path=info.path,
                                  fix=f"delete {info.path} and load an older step (valid: {self.steps()})")
        return load_payload(info.path / PAYLOAD, map_location, weights_only)
