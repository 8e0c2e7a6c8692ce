"""Embedding gradient shrink: ``emb * alpha + emb.detach() * (1 - alpha)``.

GLM-130B (Zeng et al. 2022, "GLM-130B: An Open Bilingual Pre-trained Model", section 3) found that
the embedding layer's gradient norm is orders of magnitude larger than the other layers' and that
loss spikes follow its bursts; shrinking the gradient that reaches the embedding by ``alpha = 0.1``
removed most of their spikes. The forward value is unchanged; the backward pass multiplies the
embedding's gradient by exactly ``alpha``.
"""
from __future__ import annotations

from lossguard.errors import require

require("torch", "torch", "The embedding gradient shrink")

from torch import nn  # noqa: E402

from lossguard.errors import ConfigError  # noqa: E402

#: GLM-130B's value.
DEFAULT_ALPHA = 0.1


def shrink_embedding_gradient(emb, alpha: float = DEFAULT_ALPHA):
    """Return ``emb`` with the same value but a gradient scaled by ``alpha`` on the way back.

    Args:
        emb: the embedding output, any shape.
        alpha: gradient factor in ``(0, 1]``; ``1`` is a no-op.
    """
    check_alpha(alpha)
    if alpha == 1.0:
        return emb
    return emb * alpha + emb.detach() * (1.0 - alpha)


def check_alpha(alpha: float, field: str = "embedding_grad_shrink") -> None:
    """Raise :class:`ConfigError` unless ``0 < alpha <= 1``."""
    if not isinstance(alpha, (int, float)) or not 0.0 < float(alpha) <= 1.0:
        raise ConfigError(f"{field} must be in (0, 1], got {alpha!r}", where=f"field '{field}'",
                          fix="use 0.1 (GLM-130B) or 1.0 to turn the shrink off")


class EmbeddingGradShrink(nn.Module):
    """Module form of :func:`shrink_embedding_gradient`, to place after an embedding.

    Args:
        alpha: gradient factor in ``(0, 1]`` (GLM-130B: 0.1).
    """

    def __init__(self, alpha: float = DEFAULT_ALPHA) -> None:
        super().__init__()
        check_alpha(alpha)
        self.alpha = float(alpha)

    def forward(self, x):
        """Identity forward; gradient times ``alpha``."""
        return shrink_embedding_gradient(x, self.alpha)
