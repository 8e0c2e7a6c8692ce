"""TrainState: everything a training run must save to resume bitwise-exactly, as one state dict.

What is in it and why (see ``docs/resume.md`` for the accounting):

- ``model``, ``optimizer`` (Adam's moments *and* its per-parameter ``step``, i.e. Adam's t),
  ``scheduler`` (its ``last_epoch`` = how many times ``scheduler.step()`` ran), ``scaler`` (fp16
  loss scale and its growth tracker);
- ``rng``: Python, NumPy, torch CPU and CUDA generators (:mod:`lossguard.checkpoint.rng`);
- ``data``: the data position (e.g. :class:`lossguard.data.sampler.ResumableSampler`);
- ``step``: optimizer steps taken so far; ``extras``: any other stateful objects (the guard's
  detector windows and budgets).

RNG is restored last, after everything else, because loading other state may itself draw random
numbers. With torchdata's ``StatefulDataLoader`` create ``iter(loader)`` before calling
:meth:`TrainState.load_state_dict` (or call it again after), since creating the iterator draws from
the global torch RNG.
"""
from __future__ import annotations

from typing import Any

from ..errors import CheckpointError
from .rng import capture_rng, restore_rng

STATE_FORMAT = 1


def _stateful(name: str, obj: Any) -> None:
    if obj is not None and not (hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict")):
        raise CheckpointError(f"{name} ({type(obj).__name__}) has no state_dict()/load_state_dict()",
                              fix=f"pass an object with both methods as {name}, or None")


class StateParts:
    """The stateful objects of a training loop, each checked once for ``state_dict()`` /
    ``load_state_dict()``; the base of :class:`TrainState` and its sharded twin
    (:class:`lossguard.checkpoint.sharded_state.ShardedTrainState`), which differ only in how they
    save them."""

    def __init__(self, model, optimizer, *, scheduler=None, scaler=None, data=None,
                 extras: dict[str, Any] | None = None, step: int = 0) -> None:
        for name, obj in (("model", model), ("optimizer", optimizer), ("scheduler", scheduler),
                          ("scaler", scaler), ("data", data)):
            _stateful(name, obj)
        self.extras = dict(extras or {})
        for key, obj in self.extras.items():
            _stateful(f"extras[{key!r}]", obj)
        self.model, self.optimizer, self.scheduler, self.scaler, self.data = model, optimizer, scheduler, scaler, data
        self.step = int(step)


class TrainState(StateParts):
    """The complete resumable state of a training loop.

    Args:
        model: the ``torch.nn.Module`` (for DDP pass the wrapped module's ``.module`` to keep
            checkpoints portable).
        optimizer: the ``torch.optim.Optimizer``.
        scheduler: optional LR scheduler.
        scaler: optional ``torch.amp.GradScaler``.
        data: optional data position: anything with ``state_dict()/load_state_dict()``
            (``ResumableSampler``, ``StatefulDataLoader``).
        extras: other stateful objects by name (e.g. ``{"guard": guard}``).
        step: optimizer steps taken so far; the loop increments :attr:`step` after each step.
    """

    def _parts(self) -> dict[str, Any]:
        return {"model": self.model, "optimizer": self.optimizer, "scheduler": self.scheduler,
                "scaler": self.scaler, "data": self.data}

    def state_dict(self) -> dict[str, Any]:
        """A dict of plain containers and tensors, ready for :meth:`CheckpointStore.save`."""
        sd: dict[str, Any] = {"format": STATE_FORMAT, "step": self.step}
        for name, obj in self._parts().items():
            sd[name] = None if obj is None else obj.state_dict()
        sd["extras"] = {key: obj.state_dict() for key, obj in self.extras.items()}
        sd["rng"] = capture_rng()  # last: nothing above draws random numbers, but keep the order obvious
        return sd

    def load_state_dict(self, sd: dict[str, Any], *, strict: bool = True) -> None:
        """Restore everything from :meth:`state_dict`'s output; RNG last.

        Args:
            sd: a state dict from :meth:`state_dict` (e.g. ``store.load()``).
            strict: require the same parts (scheduler, scaler, data, extras) as were saved.

        Raises:
            CheckpointError: the dict is not a TrainState checkpoint, parts are missing or extra,
                or the model/optimizer refuse the saved tensors (different architecture).
        """
        if not isinstance(sd, dict) or sd.get("format") != STATE_FORMAT or "model" not in sd:
            raise CheckpointError("not a lossguard TrainState checkpoint",
                                  fix="load a checkpoint written with TrainState.state_dict()")
        problems = []
        for name, obj in self._parts().items():
            saved = sd.get(name)
            if strict and (saved is None) != (obj is None):
                problems.append(f"{name}: checkpoint has {'none' if saved is None else 'one'}, "
                                f"this run has {'none' if obj is None else type(obj).__name__}")
        saved_extras = set(sd.get("extras", {}))
        if strict and saved_extras != set(self.extras):
            problems.append(f"extras: checkpoint has {sorted(saved_extras)}, this run has {sorted(self.extras)}")
        if problems:
            raise CheckpointError("the checkpoint does not match this run: " + "; ".join(problems),
                                  fix="build the TrainState with the same parts as the run that saved it, "
                                      "or pass strict=False")
        for name, obj in self._parts().items():
            if obj is not None and sd.get(name) is not None:
                try:
                    obj.load_state_dict(sd[name])
                except (RuntimeError, ValueError, KeyError) as exc:
                    raise CheckpointError(f"{name}.load_state_dict failed: {str(exc).splitlines()[0]}",
                                          fix=f"the saved {name} does not match this run's; use the same "
                                              "configuration as the run that saved it") from exc
        for key, obj in self.extras.items():
            if key in sd.get("extras", {}):
                obj.load_state_dict(sd["extras"][key])
        self.step = int(sd["step"])
        restore_rng(sd["rng"])

    # Convenience around a store, so a loop needs one line each way.
    def save(self, store) -> Any:
        """Save to a :class:`CheckpointStore` under :attr:`step`; returns the checkpoint path."""
        return store.save(self.step, self.state_dict())

    def restore(self, store, step: int | None = None) -> int:
        """Load ``step`` (newest valid when None) from ``store``; returns the restored step."""
        self.load_state_dict(store.load(step))
        return self.step
