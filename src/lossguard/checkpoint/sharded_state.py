"""ShardedTrainState: TrainState for a sharded run (FSDP2), in two parts: sharded and per rank.

- ``"sharded"``: model and optimizer as DCP state dicts from
  ``torch.distributed.checkpoint.state_dict.get_state_dict`` -- fully-qualified names, DTensor
  values, each rank holding only its shards. Saved by DCP (``__<rank>_0.distcp``), loadable on a
  different sharding of the same model.
- ``"rank"``: what is each rank's own and small: the step counter, the LR scheduler, the data
  position, other stateful extras (the guard's windows), and the RNG of this rank (dropout masks
  differ per rank). Saved as ``rank-NNNNN.pt`` beside the DCP files.

RNG is restored last, as in :class:`TrainState`.
"""
from __future__ import annotations

from typing import Any

from ..errors import CheckpointError
from .rng import capture_rng, restore_rng
from .sharded_layout import SHARDED_FORMAT
from .state import StateParts

__all__ = ["ShardedTrainState"]


class ShardedTrainState(StateParts):
    """The complete resumable state of a sharded training loop, one part per rank.

    Args:
        model: the ``fully_shard``-ed module (the root).
        optimizer: its optimizer (built over the sharded parameters).
        scheduler: optional LR scheduler; scaler: optional ``GradScaler``; data: optional data
            position (``ResumableSampler``).
        extras: other stateful objects by name, saved per rank.
        step: optimizer steps taken so far.
    """

    # ------------------------------------------------------------------ the two parts
    def sharded_state_dict(self) -> dict[str, Any]:
        """``{"model", "optim"}`` as DCP state dicts (DTensor shards; no gathering).

        Leaves a fresh optimizer fresh. ``get_state_dict`` materialises the state of an optimizer
        that has not stepped yet by stepping it on zero gradients at lr 0: for Adam that leaves
        ``t = 1`` and zero moments, so every later update of the run would differ from the run
        that never saved (the guard's step-0 checkpoint did exactly that, issue 23). The
        materialised tensors stay in the returned dict (DCP needs every key, and they are what a
        fresh optimizer's first step would overwrite), the live optimizer's state is emptied again,
        and :meth:`rank_state_dict` records ``optimizer_fresh`` so a load empties it too.
        """
        from torch.distributed.checkpoint.state_dict import get_state_dict

        fresh = not self.optimizer.state
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        if fresh:
            self.optimizer.state.clear()
        return {"model": model_sd, "optim": optim_sd}

    def rank_state_dict(self) -> dict[str, Any]:
        """This rank's own small state: step, scheduler, scaler, data position, extras, RNG (captured last)."""
        return {"step": self.step,
                "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
                "scaler": None if self.scaler is None else self.scaler.state_dict(),
                "data": None if self.data is None else self.data.state_dict(),
                "extras": {key: obj.state_dict() for key, obj in self.extras.items()},
                "optimizer_fresh": not self.optimizer.state,  # see sharded_state_dict
                "rng": capture_rng()}

    def state_dict(self) -> dict[str, Any]:
        """``{"format", "step", "sharded", "rank"}`` for :meth:`ShardedCheckpointStore.save`."""
        return {"format": SHARDED_FORMAT, "step": self.step, "sharded": self.sharded_state_dict(),
                "rank": self.rank_state_dict()}

    def load_rank_state_dict(self, rank_sd: dict[str, Any]) -> None:
        """Restore :meth:`rank_state_dict` output; RNG last."""
        for name, obj in (("scheduler", self.scheduler), ("scaler", self.scaler), ("data", self.data)):
            if obj is not None and rank_sd.get(name) is not None:
                obj.load_state_dict(rank_sd[name])
            elif (obj is None) != (rank_sd.get(name) is None):
                raise CheckpointError(f"{name}: the checkpoint has {'none' if rank_sd.get(name) is None else 'one'}, "
                                      f"this run has {'none' if obj is None else type(obj).__name__}",
                                      fix="build the ShardedTrainState with the same parts as the run that saved it")
        if rank_sd.get("optimizer_fresh"):
            self.optimizer.state.clear()  # saved before its first step: fresh again, as then
        saved = rank_sd.get("extras", {})
        for key, obj in self.extras.items():
            if key in saved:
                obj.load_state_dict(saved[key])
        self.step = int(rank_sd["step"])
        restore_rng(rank_sd["rng"])

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Apply a loaded checkpoint (``ShardedCheckpointStore.load``'s result) to model, optimizer
        and this rank's state."""
        from torch.distributed.checkpoint.state_dict import set_state_dict

        if not isinstance(sd, dict) or sd.get("format") != SHARDED_FORMAT or "sharded" not in sd:
            raise CheckpointError("not a lossguard sharded checkpoint",
                                  fix="load a checkpoint written with ShardedTrainState.state_dict()")
        set_state_dict(self.model, self.optimizer, model_state_dict=sd["sharded"]["model"],
                       optim_state_dict=sd["sharded"]["optim"])
        self.load_rank_state_dict(sd["rank"])

    # ------------------------------------------------------------------ with a store
    def save(self, store) -> Any:
        """Save to a :class:`ShardedCheckpointStore` under :attr:`step` (every rank calls it)."""
        return store.save(self.step, self.state_dict())

    def async_save(self, store):
        """Start an asynchronous save; returns the store's :class:`PendingSave`."""
        return store.async_save(self.step, self.state_dict())

    def restore(self, store, step: int | None = None, *, verify: bool = True) -> int:
        """Load ``step`` (newest that verifies when None) on every rank; returns the restored step."""
        # The template is what DCP fills in place: the sharded part only (the saved rank state
        # replaces this rank's, so capturing the RNG states here would be thrown away).
        template = {"format": SHARDED_FORMAT, "step": self.step, "sharded": self.sharded_state_dict()}
        self.load_state_dict(store.load(step, template=template, verify=verify))
        return self.step
