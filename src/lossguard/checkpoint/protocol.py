"""GuardStore: what the guard needs from a checkpoint store, as a typed Protocol.

Three stores implement it: :class:`CheckpointStore` (one ``torch.save`` file per step),
:class:`ShardedCheckpointStore` (DCP shards written by every rank, optionally off the training path)
and the framework callbacks' read-only view of HF / Lightning checkpoints
(``integrations/_checkpoints.py``). The guard and its executor talk to each through these names
only -- never by probing for attributes -- so a store of a new kind says what it is by implementing
them, and a wrong object is refused at construction with a clear error
(:func:`check_store`). Torch-free.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["GuardStore", "check_store"]


@runtime_checkable
class GuardStore(Protocol):
    """The checkpoint store a :class:`~lossguard.guard.StabilityGuard` saves to and rolls back from."""

    directory: Path
    """Where the checkpoints live (the run ledger ``ledger.json`` is written beside them)."""
    sharded: bool
    """Checkpoints are DCP shards loaded into a template: the guard builds a ShardedTrainState."""
    asynchronous: bool
    """Saves go through :meth:`async_save`, off the training path (a sharded store's own gloo group)."""

    def steps(self) -> list[int]:
        """Steps of the valid checkpoints, oldest first (this rank's view)."""
        ...

    def agreed_steps(self) -> list[int]:
        """The steps every rank agrees on (a collective for a sharded store: rank 0's listing), so
        that every rank picks the same rollback target; :meth:`steps` elsewhere."""
        ...

    def newest_at_or_before(self, step: int) -> int | None:
        """The newest valid checkpoint step ``<= step``, or None."""
        ...

    def path_of(self, step: int) -> Path:
        """Where the checkpoint of ``step`` is (or would be)."""
        ...

    def protect(self, step: int) -> None:
        """Keep the checkpoint of ``step`` from pruning (a rollback target)."""
        ...

    def unprotect(self, step: int) -> None:
        """Release :meth:`protect`."""
        ...

    def save(self, step: int, state: dict[str, Any]) -> Any:
        """Write the checkpoint of ``step``."""
        ...

    def wait(self) -> Any:
        """Wait for an asynchronous save in flight (a no-op for a synchronous store)."""
        ...


def check_store(store: Any) -> None:
    """Raise a :class:`~lossguard.errors.ConfigError` naming what is missing when ``store`` (not None)
    does not implement :class:`GuardStore`."""
    if store is None or isinstance(store, GuardStore):
        return
    from ..errors import ConfigError
    missing = [n for n in ("directory", "sharded", "asynchronous", "steps", "agreed_steps", "newest_at_or_before",
                           "path_of", "protect", "unprotect", "save", "wait") if not hasattr(store, n)]
    raise ConfigError(f"store={type(store).__name__} is not a checkpoint store the guard can use (missing: "
                      f"{', '.join(missing)})",
                      fix="pass a lossguard.checkpoint.CheckpointStore or ShardedCheckpointStore")
