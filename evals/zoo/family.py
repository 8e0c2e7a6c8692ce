"""The shape every zoo family shares: how to build its model and data, its loss and its garbage.

One file per family (``mlp.py``, ``cnn.py``, ...) defines one :class:`Family`. The training loop
(:mod:`.loop` for plain PyTorch, :mod:`.hf_loop` for ``transformers.Trainer``) knows nothing about
the families beyond this record.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.nn import functional as F

from evals.zoo.spec import Optim

DROPOUT = 0.1
"""Dropout of every zoo model (on, as in real training: it makes healthy runs noisier)."""


class Trainer(str, enum.Enum):
    """Which loop trains the family."""

    PLAIN = "plain"
    """The README's loop: ``DataLoader(dataset, batch_sampler=ResumableSampler)`` + ``guard.step``."""
    HF = "hf"
    """``transformers.Trainer`` with lossguard's HF ``StabilityCallback``."""


@dataclass(frozen=True, kw_only=True)
class Family:
    """A model family of the zoo."""

    name: str
    """Short name (the key in :data:`evals.zoo.FAMILIES`)."""
    tuned: bool
    """False = held out of all tuning of the guard: its figures are reported separately."""
    model: Callable[[], torch.nn.Module]
    """Builds the model from torch's global RNG (seeded by the loop before the call)."""
    data: Callable[[], tuple[Any, Any]]
    """``(train dataset, held-out dataset)``; the held-out one has ``batches()``."""
    loss: Callable[[torch.nn.Module, Any], torch.Tensor]
    """Mean loss of ``model`` on one collated batch ``(x, y)``."""
    garbage: Callable[[Any, torch.Generator], Any]
    """A garbage batch of the same shapes as the given one (the bad-data pocket)."""
    lr: dict
    """Peak LR per :class:`Optim` (chosen so that the clean run trains well, before any guard)."""
    batch_sizes: tuple[int, ...]
    """Batch sizes the zoo runs, smallest (noisiest) first."""
    steps: int = 400
    """Steps of one run."""
    trainer: Trainer = Trainer.PLAIN
    """The loop that trains it."""

    def peak_lr(self, optimizer: Optim) -> float:
        """The family's peak LR for ``optimizer``."""
        return self.lr[optimizer]


def classify_loss(model: torch.nn.Module, batch) -> torch.Tensor:
    """Cross-entropy of a classifier ``model(x) -> logits`` on ``(x, y)``."""
    x, y = batch
    return F.cross_entropy(model(x), y)


def garbage_features(batch, g: torch.Generator, *, scale: float = 6.0):
    """Corrupt records: inputs replaced by wide noise (``scale`` x N(0, 1)), labels drawn at random."""
    x, y = batch
    return torch.randn(x.shape, generator=g) * scale, torch.randint(int(y.max()) + 1 if y.numel() else 1,
                                                                    y.shape, generator=g)


def garbage_tokens(vocab: int) -> Callable[[Any, torch.Generator], Any]:
    """Corrupt records of token inputs: random tokens, random targets of the same shapes."""
    def make(batch, g: torch.Generator):
        x, y = batch
        hi = vocab if y.dim() == x.dim() else int(y.max()) + 1
        return torch.randint(vocab, x.shape, generator=g), torch.randint(hi, y.shape, generator=g)
    return make


def held_out_loss(family: Family, model: torch.nn.Module, held) -> float:
    """Mean loss over the fixed held-out batches, in eval mode (dropout off), without gradients."""
    was = model.training
    model.eval()
    with torch.no_grad():
        losses = [float(family.loss(model, b)) for b in held.batches()]
    model.train(was)
    return sum(losses) / len(losses)


def final_held_out_loss(family: Family, model: torch.nn.Module, held) -> float:
    """A run's outcome: :func:`held_out_loss`, or ``inf`` when the weights or that loss are not finite."""
    finite = all(torch.isfinite(p).all() for p in model.parameters())
    loss = held_out_loss(family, model, held) if finite else math.inf
    return loss if math.isfinite(loss) else math.inf
