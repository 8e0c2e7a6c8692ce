"""Fault injector: NaN gradients, loss spikes, overflows and bad-data pockets at chosen steps.

Used by the guard's tests (and ``lossguard demo``) to drive every branch of the recovery policy
on a real model that really trains. Step faults fire at a step number -- once by default, like a
transient glitch, so a rollback that replays that step does not meet it again. A bad-data pocket
is tied to *data-stream batch indices*: it fires every time those batches are read, so only
skipping the data cures it, exactly as with a real corrupt shard.

A loop uses it in three places::

    batch = faults.batch(step, guard.batch_index, batch)   # bad-data pocket: corrupt the batch
    loss = faults.loss(step, model_loss)                    # loss spike / NaN loss
    loss.backward(); faults.grads(step, model)              # NaN / Inf gradient
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import raise_all

if TYPE_CHECKING:
    import torch

KINDS = ("nan_grad", "inf_grad", "nan_loss", "loss_spike", "bad_data")


@dataclass(kw_only=True)
class Fault:
    """One fault to inject."""

    kind: str
    """``"nan_grad"``, ``"inf_grad"``, ``"nan_loss"``, ``"loss_spike"`` or ``"bad_data"``."""
    step: int | None = None
    """Step at which a step fault fires (all kinds but ``bad_data``)."""
    steps: int = 1
    """How many consecutive steps from ``step`` it fires on."""
    batches: tuple[int, int] | None = None
    """Half-open range of data-stream batch indices a ``bad_data`` pocket corrupts."""
    factor: float = 10.0
    """Loss multiplier of a ``loss_spike``; scale of the corruption of a ``bad_data`` batch."""
    once: bool = True
    """A step fault fires only the first time its step is reached (a rollback does not meet it again)."""
    rank: int | None = None
    """Only on this distributed rank (None: every rank)."""

    def __post_init__(self) -> None:
        p = []
        if self.kind not in KINDS:
            p.append(f"kind must be one of {KINDS}, got {self.kind!r}")
        elif self.kind == "bad_data":
            if self.batches is None or not 0 <= self.batches[0] < self.batches[1]:
                p.append(f"a bad_data fault needs batches=(start, stop) with 0 <= start < stop, got {self.batches!r}")
        elif self.step is None or self.step < 0:
            p.append(f"a {self.kind} fault needs step >= 0, got {self.step!r}")
        if self.steps < 1:
            p.append(f"steps must be >= 1, got {self.steps}")
        raise_all(p, fix="correct the Fault arguments")


@dataclass
class FaultInjector:
    """Applies a list of :class:`Fault` to a training loop; records what fired in :attr:`fired`.

    Args:
        faults: the faults.
        rank: this process's distributed rank (faults with ``rank`` set fire only there).
    """

    faults: list[Fault]
    rank: int = 0
    fired: list[tuple[str, int]] = field(default_factory=list)
    _done: set = field(default_factory=set)

    def _active(self, kind: str, step: int) -> list[Fault]:
        out = []
        for i, f in enumerate(self.faults):
            if f.kind != kind or (f.rank is not None and f.rank != self.rank):
                continue
            if f.step is not None and f.step <= step < f.step + f.steps and not (f.once and (i, step) in self._done):
                self._done.add((i, step))
                self.fired.append((kind, step))
                out.append(f)
        return out

    def batch(self, step: int, batch_index: int, batch: Any) -> Any:
        """Corrupt ``batch`` if ``batch_index`` is in a bad-data pocket: float tensors are scaled by
        ``factor`` and offset, integer tensors (token ids) are replaced by ids drawn from a generator
        seeded by the batch index (the same garbage every time the batch is read)."""
        import torch

        for f in self.faults:
            if f.kind != "bad_data" or (f.rank is not None and f.rank != self.rank):
                continue
            if f.batches is not None and f.batches[0] <= batch_index < f.batches[1]:
                self.fired.append(("bad_data", step))
                gen = torch.Generator().manual_seed(1_000_003 * batch_index + 17)
                if isinstance(batch, (tuple, list)):
                    return type(batch)(_garble(t, f.factor, gen) for t in batch)
                return _garble(batch, f.factor, gen)
        return batch

    def loss(self, step: int, loss):
        """The loss, multiplied at a ``loss_spike`` step (gradients scale with it) or NaN at ``nan_loss``."""
        for f in self._active("loss_spike", step):
            loss = loss * f.factor
        for _ in self._active("nan_loss", step):
            loss = loss * float("nan")
        return loss

    def grads(self, step: int, model) -> None:
        """After ``backward()``: put a NaN (``nan_grad``) or an Inf (``inf_grad``) into one gradient."""
        for kind, value in (("nan_grad", float("nan")), ("inf_grad", float("inf"))):
            for _ in self._active(kind, step):
                for p in model.parameters():
                    if p.grad is not None:
                        p.grad.view(-1)[0] = value
                        break


def _garble(t: Any, factor: float, gen: torch.Generator) -> Any:
    """One bad-data item: floats scaled by ``factor`` plus ``factor``; integer tensors (token ids)
    replaced by ids drawn from ``gen``; anything else unchanged."""
    import torch

    if not torch.is_tensor(t):
        return t
    if t.is_floating_point():
        return t * factor + factor
    hi = int(t.max()) + 1 if t.numel() else 1
    return torch.randint(0, max(hi, 2), t.shape, generator=gen, dtype=t.dtype)
