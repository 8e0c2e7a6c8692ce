"""Embedding LayerNorm: a LayerNorm right after the token embedding.

BLOOM (Le Scao et al. 2022, "BLOOM: A 176B-Parameter Open-Access Multilingual Language Model",
and "What Language Model to Train if You Have One Million GPU Hours?") adds it after finding that
it removes loss spikes in their 104B pilot runs, at a small cost in zero-shot quality. It bounds
the scale of what enters the first block however large individual embedding rows grow.
"""
from __future__ import annotations

from lossguard.errors import require

require("torch", "torch", "Embedding LayerNorm")

from torch import nn  # noqa: E402


class EmbeddingLayerNorm(nn.Module):
    """Token embedding followed by LayerNorm over the embedding dimension.

    Args:
        num_embeddings: vocabulary size.
        embedding_dim: model width ``H``.
        bias: whether the LayerNorm has a bias.
        eps: LayerNorm epsilon.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, *, bias: bool = True,
                 eps: float = 1e-5) -> None:
        super().__init__()
        self.embedding = nn.Embedding(num_embeddings, embedding_dim)
        self.norm = nn.LayerNorm(embedding_dim, eps=eps, bias=bias)

    @property
    def weight(self):
        """The embedding matrix (so weight tying with an LM head works as with ``nn.Embedding``)."""
        return self.embedding.weight

    def forward(self, idx):
        """Embed ``idx`` (``(B, T)`` int64) and normalise; returns ``(B, T, H)``."""
        return self.norm(self.embedding(idx))
