"""fp16 loss scale: a full reset of ``torch.amp.GradScaler`` and a floor under the scale.

Dynamic loss scaling (Micikevicius et al. 2018, "Mixed Precision Training") halves the scale on
every step whose gradients overflow and doubles it after ``growth_interval`` clean steps. Two ways
it goes wrong in long runs:

* After an instability the scale has backed off many times; ``scaler.update(new_scale=x)`` sets
  the scale but leaves the *growth tracker* (the count of consecutive clean steps) as it was, so
  the first doubling comes at an arbitrary time and a resumed run does not behave like a fresh one.
  :func:`reset_grad_scaler` resets both, through the scaler's public ``state_dict`` /
  ``load_state_dict``.
* A run that overflows on every step (NaN in the forward pass, a diverged model) halves the scale
  each step and never applies an update; the scale reaches 1, then 2**-20, and fp16 gradients
  underflow to zero: training has stalled with no error. torch's own documentation of
  ``GradScaler.update`` warns that a scale below 1 means something is wrong. :class:`LossScaleFloor`
  keeps the scale at or above a floor (default 1.0) and counts how often it had to, so the stall is
  visible (and a guard can act on it) instead of silent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lossguard.errors import ConfigError

if TYPE_CHECKING:
    import torch

def reset_grad_scaler(scaler, scale: float | None = None) -> float:
    """Reset ``scaler`` as if freshly built with ``init_scale=scale``: scale AND growth tracker.

    Works before the scaler's first ``update()`` too (it then starts from these values). This is the
    one implementation; the guard's loss-scale reset calls it.

    Args:
        scaler: a ``torch.amp.GradScaler`` (any device); a disabled scaler is left alone.
        scale: the new scale (> 0); None = the scaler's own initial scale.

    Returns:
        The scale the scaler now has.
    """
    if scale is not None and not scale > 0:
        raise ConfigError(f"loss scale must be > 0, got {scale!r}", where="argument 'scale'",
                          fix="pass a positive scale such as 65536.0")
    if not scaler.is_enabled():
        return float(scaler.get_scale())
    state = scaler.state_dict()
    state["scale"] = float(scaler._init_scale if scale is None else scale)
    state["_growth_tracker"] = 0
    scaler.load_state_dict(state)
    return state["scale"]


@dataclass(kw_only=True)
class LossScaleFloor:
    """Keeps a GradScaler's scale at or above ``min_scale``; call :meth:`apply` after ``update()``.

    The check runs on the scale tensor's device without a host sync (``clamp_`` plus a counter
    tensor); read :attr:`hits` when logging.
    """

    min_scale: float = 1.0
    """Lowest scale allowed (torch warns below 1; fp16 gradients underflow far below it)."""
    reset_to: float | None = None
    """If set, a scale found below the floor is reset to this value with the growth tracker
    (a full :func:`reset_grad_scaler`, host sync) instead of clamped to the floor."""

    def __post_init__(self) -> None:
        if not self.min_scale > 0:
            raise ConfigError(f"min_scale must be > 0, got {self.min_scale!r}",
                              where="field 'min_scale'", fix="use 1.0 (torch's warning level)")
        if self.reset_to is not None and not self.reset_to >= self.min_scale:
            raise ConfigError(f"reset_to ({self.reset_to!r}) must be >= min_scale "
                              f"({self.min_scale!r})", where="field 'reset_to'",
                              fix="reset to a scale above the floor, e.g. 65536.0")
        self._hits: torch.Tensor | None = None

    def apply(self, scaler):
        """Enforce the floor on ``scaler``; returns a 0-d bool tensor: whether it was below."""
        import torch

        if not scaler.is_enabled() or scaler._scale is None:
            return torch.zeros((), dtype=torch.bool)
        scale = scaler._scale  # the scaler's own device tensor, updated in place by update()
        below = scale < self.min_scale
        if self._hits is None:
            self._hits = torch.zeros((), dtype=torch.int64, device=scale.device)
        self._hits += below
        if self.reset_to is not None:
            if bool(below):
                reset_grad_scaler(scaler, self.reset_to)
        else:
            scale.clamp_(min=self.min_scale)
        return below

    @property
    def hits(self) -> int:
        """How many :meth:`apply` calls found the scale below the floor (host sync)."""
        return 0 if self._hits is None else int(self._hits)
