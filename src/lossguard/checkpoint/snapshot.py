"""HostSnapshot: a copy of this rank's training state in host memory, for a rollback without disk.

A rollback ~100 steps back (PaLM's recipe) normally reads a checkpoint from the filesystem; on a
large run that is minutes of I/O on every rank. A host snapshot keeps a copy of the LOCAL shard
of every parameter, buffer and optimizer-state tensor (plus the param-group hyper-parameters and the
rank's small state: step, scheduler, data position, extras, RNG) in preallocated host buffers,
taken every ``every`` steps, the last ``keep`` of them held. Restoring copies the buffers back into
the live tensors in place. Memory: ``keep`` host copies of the rank's shard of model + optimizer
(for AdamW, 3x the parameter shard each).

Off the critical path: the host buffers are allocated once and reused (pinned on CUDA), and on CUDA
the copies are issued on a side stream with ``non_blocking=True``; the training stream waits for
them on the device (an event, not a host sync) before the next optimizer step could overwrite the
source. On the CPU the copy is a plain memcpy (measured in benchmarks/checkpoint_dcp.py).
Works for plain tensors, DTensors (FSDP2: the local shard) and any optimizer with tensor state.
"""
from __future__ import annotations

import copy
import io
from typing import TYPE_CHECKING, Any

from ..errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    import torch

__all__ = ["HostSnapshot"]


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


class _Slot:
    """One snapshot: host copies of the tensors, the param-group settings, the small state."""

    def __init__(self) -> None:
        self.step = -1  # set when the snapshot is taken, before the slot is held
        self.host: list[torch.Tensor] = []
        self.groups: list[dict] = []
        self.small = b""
        self.event: torch.cuda.Event | None = None


class HostSnapshot:
    """In-memory copies of the local training state, taken every ``every`` steps, the last ``keep``
    of them kept.

    Args:
        state: a :class:`ShardedTrainState` or :class:`TrainState`-like object with ``model``,
            ``optimizer``, ``step`` and (for the small per-rank part) ``rank_state_dict()`` /
            ``load_rank_state_dict()``; a plain TrainState's scheduler/data/extras/RNG are taken
            through the same names when present.
        every: take a snapshot when ``step % every == 0`` (:meth:`maybe_take`).
        keep: how many snapshots to keep (the oldest one's buffers are reused for the next). A
            rollback ``D`` steps back with snapshots every ``N`` steps needs ``keep >= D // N + 1``.
            Memory: ``keep`` host copies of this rank's shard of model + optimizer.
    """

    def __init__(self, state, *, every: int, keep: int = 1) -> None:
        if not isinstance(every, int) or every < 1:
            raise ConfigError(f"every must be an int >= 1, got {every!r}", fix="snapshot every N >= 1 steps")
        if not isinstance(keep, int) or keep < 1:
            raise ConfigError(f"keep must be an int >= 1, got {keep!r}", fix="keep at least one snapshot")
        self.state, self.every, self.keep = state, every, keep
        self._slots: list[_Slot] = []  # oldest first
        self._stream: torch.cuda.Stream | None = None

    @property
    def steps(self) -> list[int]:
        """Steps of the snapshots held, oldest first."""
        return [slot.step for slot in self._slots]

    @property
    def step(self) -> int | None:
        """Step of the newest snapshot (None before the first)."""
        return self._slots[-1].step if self._slots else None

    def _tensors(self) -> list:
        """Every tensor a rollback must restore, in a fixed order: params, buffers, optimizer state."""
        model, opt = self.state.model, self.state.optimizer
        out = [_local(p.data if not hasattr(p, "to_local") else p) for p in model.parameters()]
        out += [_local(b) for b in model.buffers()]
        for group in opt.param_groups:
            for p in group["params"]:
                st = opt.state.get(p, {})
                out += [_local(st[k]) for k in sorted(st) if hasattr(st[k], "copy_")]
        return out

    def discard_after(self, step: int) -> None:
        """Forget the snapshots newer than ``step`` (a rollback to ``step`` abandoned them); their
        buffers are dropped, and re-allocated by the next :meth:`take` that needs one."""
        self._slots = [s for s in self._slots if s.step <= int(step)]

    def maybe_take(self, step: int) -> bool:
        """Take a snapshot if ``step`` is a multiple of ``every``; returns whether it did."""
        if step % self.every:
            return False
        self.take()
        return True

    def take(self) -> None:
        """Copy the local state into host buffers (the oldest snapshot's, once ``keep`` are held)."""
        import torch

        tensors = self._tensors()
        step = int(self.state.step)
        self._slots = [s for s in self._slots if s.step != step]  # a step taken again replaces itself
        slot = self._slots.pop(0) if len(self._slots) >= self.keep else _Slot()
        if [h.shape for h in slot.host] != [t.shape for t in tensors]:
            # first use, or the optimizer state appeared / changed shape: allocate once
            slot.host = [torch.empty(t.shape, dtype=t.dtype, device="cpu",
                                     pin_memory=t.is_cuda and torch.cuda.is_available()) for t in tensors]
        slot.event = None
        if any(t.is_cuda for t in tensors):
            if self._stream is None:
                self._stream = torch.cuda.Stream()
            self._stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self._stream):
                for h, t in zip(slot.host, tensors, strict=True):
                    h.copy_(t, non_blocking=True)
            slot.event = self._stream.record_event()
            # The next kernels on the training stream (the optimizer step) wait for the copy on the
            # device; the host never waits.
            torch.cuda.current_stream().wait_event(slot.event)
        else:
            with torch.no_grad():
                for h, t in zip(slot.host, tensors, strict=True):
                    h.copy_(t)
        slot.groups = [{k: copy.deepcopy(v) for k, v in g.items() if k != "params"}
                       for g in self.state.optimizer.param_groups]
        buf = io.BytesIO()
        torch.save(self._small_state(), buf)
        slot.small, slot.step = buf.getvalue(), step
        self._slots.append(slot)

    def _small_state(self) -> dict[str, Any]:
        if hasattr(self.state, "rank_state_dict"):
            return self.state.rank_state_dict()
        from .rng import capture_rng

        parts = {n: getattr(self.state, n, None) for n in ("scheduler", "scaler", "data")}
        return {"step": self.state.step, "parts": {n: o.state_dict() for n, o in parts.items() if o is not None},
                "extras": {k: o.state_dict() for k, o in getattr(self.state, "extras", {}).items()},
                "rng": capture_rng()}

    def restore(self, step: int | None = None) -> int:
        """Put a snapshot back into the live model and optimizer (in place); returns its step.

        Args:
            step: the snapshot to restore (None: the newest).

        Raises:
            CheckpointError: no such snapshot, or the state's tensors no longer match it.
        """
        import torch

        slot = next((s for s in reversed(self._slots) if step is None or s.step == int(step)), None)
        if slot is None:
            raise CheckpointError(f"no in-memory snapshot of step {step} (held: {self.steps})",
                                  fix="take() one first, or load the checkpoint from disk")
        tensors = self._tensors()
        if [h.shape for h in slot.host] != [t.shape for t in tensors]:
            raise CheckpointError("the model or optimizer changed shape since the snapshot",
                                  fix="roll back from a checkpoint on disk instead")
        if slot.event is not None:
            torch.cuda.current_stream().wait_event(slot.event)
        with torch.no_grad():
            for h, t in zip(slot.host, tensors, strict=True):
                t.copy_(h, non_blocking=t.is_cuda)
        for group, saved in zip(self.state.optimizer.param_groups, slot.groups, strict=True):
            group.update(copy.deepcopy(saved))
        small = torch.load(io.BytesIO(slot.small), weights_only=False)
        if hasattr(self.state, "load_rank_state_dict"):
            self.state.load_rank_state_dict(small)
        else:
            from .rng import restore_rng

            for name, sd in small["parts"].items():
                getattr(self.state, name).load_state_dict(sd)
            for key, sd in small["extras"].items():
                self.state.extras[key].load_state_dict(sd)
            self.state.step = int(small["step"])
            restore_rng(small["rng"])
        return int(slot.step)

    @property
    def nbytes(self) -> int:
        """Host memory held by the tensor copies of all snapshots, in bytes."""
        return sum(h.numel() * h.element_size() for slot in self._slots for h in slot.host)
