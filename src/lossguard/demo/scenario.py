"""What a demo scenario is: the settings of one deterministic run of the tiny GPT.

A :class:`Scenario` fixes the model, optimizer, schedule (with optional LR jumps), data seed and an
optional :class:`Pocket` of garbage batches; the catalogue of named scenarios and what each measured
is :mod:`lossguard.demo.scenarios`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from lossguard.errors import raise_all

#: Kinds of garbage a bad-data pocket can hold.
POCKET_KINDS = ("random_bytes", "repeat", "foreign")
#: Optimizers :func:`lossguard.demo.unguarded.run` can build.
OPTIMIZERS = ("adamw", "adamw_eps_free", "adam_atan2")


@dataclass(frozen=True, kw_only=True)
class Pocket:
    """A stretch of garbage batches at a known step."""

    start: int
    """First step (0-based) whose batch is garbage."""
    length: int
    """Number of consecutive garbage batches."""
    kind: str = "random_bytes"
    """``random_bytes`` (uniform bytes), ``repeat`` (one byte repeated), ``foreign`` (Cyrillic /
    Greek letters as UTF-8 bytes: text from another alphabet)."""

    def __post_init__(self) -> None:
        problems = []
        if self.start < 0:
            problems.append(f"field 'start' must be >= 0, got {self.start}")
        if self.length <= 0:
            problems.append(f"field 'length' must be > 0, got {self.length}")
        if self.kind not in POCKET_KINDS:
            problems.append(f"field 'kind' must be one of {', '.join(POCKET_KINDS)}, "
                            f"got {self.kind!r}")
        raise_all(problems, fix="correct the Pocket fields listed above")

    def covers(self, step: int) -> bool:
        """Whether the batch of ``step`` is garbage."""
        return self.start <= step < self.start + self.length


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One reproducible training run of the tiny GPT on the shipped corpus."""

    name: str
    """Short identifier."""
    description: str = ""
    """What the scenario shows."""
    model: dict = field(default_factory=dict)
    """Keyword arguments of :class:`lossguard.demo.model.GPTConfig`."""
    steps: int = 600
    """Optimizer steps."""
    batch_size: int = 16
    """Sequences per batch."""
    seq_len: int = 64
    """Tokens per sequence (<= the model's block_size)."""
    lr: float = 3e-3
    """Peak learning rate."""
    warmup: int = 50
    """Linear warm-up steps."""
    min_lr_frac: float = 0.1
    """Cosine decay ends at ``lr * min_lr_frac`` at the last step."""
    lr_jumps: tuple = ()
    """``((step, factor), ...)``: from ``step`` on the scheduled LR is multiplied by ``factor``
    (a run resumed with the wrong LR, a schedule bug); empty for a plain schedule."""
    optimizer: str = "adamw"
    """One of :data:`OPTIMIZERS`."""
    weight_decay: float = 0.1
    """Decoupled weight decay."""
    betas: tuple = (0.9, 0.95)
    """Adam betas."""
    eps: float = 1e-8
    """Adam epsilon (ignored by the eps-free optimizers)."""
    grad_clip: float = 0.0
    """Clip the global grad norm to this value; 0 = no clipping."""
    pocket: Pocket | None = None
    """Bad-data pocket, or ``None`` for clean data."""
    seed: int = 0
    """Seed of the model init."""
    data_seed: int = 1234
    """Seed of the batch order."""
    eval_batches: int = 8
    """Held-out batches (fixed) for the final loss."""
    eval_every: int = 100
    """Held-out evaluation interval in steps."""

    def __post_init__(self) -> None:
        problems = []
        for f in ("steps", "batch_size", "seq_len", "eval_batches", "eval_every"):
            if getattr(self, f) <= 0:
                problems.append(f"field '{f}' must be > 0, got {getattr(self, f)}")
        if not self.lr > 0:
            problems.append(f"field 'lr' must be > 0, got {self.lr}")
        if self.warmup < 0:
            problems.append(f"field 'warmup' must be >= 0, got {self.warmup}")
        if self.optimizer not in OPTIMIZERS:
            problems.append(f"field 'optimizer' must be one of {', '.join(OPTIMIZERS)}, "
                            f"got {self.optimizer!r}")
        raise_all(problems, fix=f"correct the Scenario fields of {self.name!r} listed above")

    def lr_at(self, step: int) -> float:
        """Learning rate of ``step``: linear warm-up, cosine to ``lr * min_lr_frac``, times jumps."""
        factor = 1.0
        for at, f in self.lr_jumps:
            if step >= at:
                factor *= f
        if step < self.warmup:
            return factor * self.lr * (step + 1) / self.warmup
        t = (step - self.warmup) / max(1, self.steps - self.warmup)
        return factor * self.lr * (self.min_lr_frac
                                   + (1 - self.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))

    def with_(self, **changes) -> "Scenario":
        """A copy with ``changes``; ``model=`` is merged into the model dict."""
        if "model" in changes:
            changes["model"] = {**self.model, **changes["model"]}
        return replace(self, **changes)
