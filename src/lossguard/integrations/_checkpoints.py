"""A framework's own checkpoints seen as a store, and where a relaunched run must resume from.

The HF Trainer writes ``<output_dir>/checkpoint-<step>/`` and Lightning's ``ModelCheckpoint`` writes
``<dirpath>/...step=<step>....ckpt``; the guard's executor only needs to list their steps, name a
path and protect a rollback target. :class:`FrameworkCheckpoints` gives it that view; the run
ledger (``ledger.json``) lives in the same directory.

The restart path (docs/large-runs.md): where a rollback is needed, the callback books it in the
ledger (target in ``resume_from``, the batches to skip in ``skip_ranges``), stops the framework and
exits with ``ExitCode.ROLLBACK`` (75). ``torchrun --max-restarts`` (or a scheduler) starts the same
script again, which passes :func:`resume_checkpoint` to the framework's resume argument; the
callback then withholds the updates of the booked batches.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..checkpoint.names import FRAMEWORKS, framework_step
from ..recovery.ledger import LEDGER_FILE, RunLedger

__all__ = ["FrameworkCheckpoints", "resume_checkpoint"]

class FrameworkCheckpoints:
    """The checkpoints a framework wrote in one directory, read-only, as the executor needs them.

    Args:
        directory: HF's ``output_dir`` or Lightning's ``ModelCheckpoint.dirpath``.
        kind: ``"hf"`` (``checkpoint-<step>`` directories) or ``"lightning"`` (files with
            ``step=<step>`` in the name, e.g. ``filename="{step}"``).
    """

    def __init__(self, directory: str | os.PathLike, kind: str) -> None:
        if kind not in FRAMEWORKS:
            from ..errors import ConfigError
            raise ConfigError(f"kind must be one of {sorted(FRAMEWORKS)}, got {kind!r}", fix="pass 'hf' or 'lightning'")
        self.directory, self.kind = Path(directory), kind
        self._protected: set[int] = set()

    def _found(self) -> dict[int, Path]:
        out: dict[int, Path] = {}
        if not self.directory.is_dir():
            return out
        for entry in self.directory.iterdir():
            step = framework_step(entry.name if self.kind == "hf" else entry.stem + ".", self.kind)
            # An HF checkpoint directory is complete once trainer_state.json is in it (written
            # after the weights, optimizer and RNG); a half-written one is no rollback target.
            complete = (entry / "trainer_state.json").is_file() if self.kind == "hf" else entry.suffix == ".ckpt"
            if step is not None and complete:
                out[step] = entry
        return out

    sharded = False
    """Framework checkpoints are restored by the framework (:class:`~lossguard.checkpoint.protocol.GuardStore`)."""
    asynchronous = False
    """The guard never saves here (:class:`~lossguard.checkpoint.protocol.GuardStore`)."""

    def save(self, step: int, state) -> None:
        """The framework writes its own checkpoints: the guard never saves through this view."""
        from ..errors import ConfigError
        raise ConfigError("the framework writes its own checkpoints; the guard does not save through "
                          "FrameworkCheckpoints", fix="leave GuardConfig.checkpoint_every=None under a framework")

    def wait(self) -> None:
        """Nothing to wait for (the guard never saves here)."""

    def agreed_steps(self) -> list[int]:
        """:meth:`steps` (one directory, read by every rank)."""
        return self.steps()

    def steps(self) -> list[int]:
        """Steps of the checkpoints present, oldest first."""
        return sorted(self._found())

    def newest_at_or_before(self, step: int) -> int | None:
        """The newest checkpoint step ``<= step``, or None."""
        older = [s for s in self.steps() if s <= step]
        return older[-1] if older else None

    def path_of(self, step: int) -> Path:
        """The checkpoint of ``step`` (its expected name when absent)."""
        return self._found().get(int(step), self.directory / (f"checkpoint-{int(step)}" if self.kind == "hf"
                                                              else f"step={int(step)}.ckpt"))

    def supersede_after(self, step: int) -> list[int]:
        """Remove the framework's checkpoints newer than ``step`` (a rollback to ``step`` abandoned
        their timeline): each is renamed to a hidden ``.superseded-*`` name first (atomic, and no
        longer matched by :meth:`steps` or the framework's own listing), then deleted. Safe to call
        from several ranks at once (a name another rank already moved is passed over).

        Returns:
            The removed steps.
        """
        import shutil

        removed: list[int] = []
        if not self.directory.is_dir():
            return removed
        for entry in sorted(self.directory.iterdir()):
            found = framework_step(entry.name if self.kind == "hf" else entry.stem + ".", self.kind)
            if found is None or found <= int(step) or entry.name.startswith("."):
                continue
            side = entry.with_name(f".superseded-{entry.name}-{os.getpid()}")
            try:
                os.rename(entry, side)
            except FileNotFoundError:
                continue  # another rank moved it first
            shutil.rmtree(side, ignore_errors=True) if side.is_dir() else side.unlink(missing_ok=True)
            removed.append(found)
        return removed

    def protect(self, step: int) -> None:
        """Remember a rollback target. The framework prunes on its own: keep ``save_total_limit``
        (HF) / ``save_top_k`` (Lightning) large enough that the target survives."""
        self._protected.add(int(step))

    def unprotect(self, step: int) -> None:
        """Forget a rollback target."""
        self._protected.discard(int(step))


def resume_checkpoint(directory: str | os.PathLike, kind: str) -> str | None:
    """The checkpoint a (re)launched run must resume from: the ledger's ``resume_from`` when a
    rollback was booked before the restart, else the newest checkpoint, else None (a fresh start).

    Pass it to ``trainer.train(resume_from_checkpoint=...)`` (HF) or ``trainer.fit(..., ckpt_path=...)``
    (Lightning).

    With a booked rollback it also finishes it: the checkpoints newer than the target (the abandoned
    timeline, and any the framework wrote on its way out) are removed, so a crash after the resumed
    run clears ``resume_from`` can never bring them back.
    """
    ckpts = FrameworkCheckpoints(directory, kind)
    ledger_path = Path(directory) / LEDGER_FILE
    if ledger_path.exists():
        target = RunLedger.load(ledger_path).resume_from
        if target is not None:
            ckpts.supersede_after(target)
            return str(ckpts.path_of(target))
    steps = ckpts.steps()
    return str(ckpts.path_of(steps[-1])) if steps else None
