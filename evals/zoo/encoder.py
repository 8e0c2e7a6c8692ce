"""Zoo family: a 2-layer ``nn.TransformerEncoder`` classifier of teacher-labelled sequences (tuned)."""
from __future__ import annotations

import torch
from torch import nn

from evals.zoo import data
from evals.zoo.family import DROPOUT, Family, classify_loss, garbage_tokens
from evals.zoo.spec import Optim

VOCAB, LENGTH, WIDTH = 16, 16, 32


class EncoderClassifier(nn.Module):
    """Token + position embedding, 2 pre-LN encoder layers (4 heads), mean-pool, linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(torch.randn(LENGTH, WIDTH) * 0.02)
        layer = nn.TransformerEncoderLayer(WIDTH, 4, dim_feedforward=2 * WIDTH, dropout=DROPOUT,
                                           batch_first=True, norm_first=True)
        # enable_nested_tensor only matters with padding masks; off avoids its warning with norm_first.
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, data.N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, N_CLASSES)`` of token ids ``x`` ``(B, LENGTH)``."""
        return self.head(self.enc(self.tok(x) + self.pos).mean(1))


FAMILY = Family(name="encoder", tuned=True, model=EncoderClassifier,
                data=lambda: data.sequences(length=LENGTH, vocab=VOCAB), loss=classify_loss,
                garbage=garbage_tokens(VOCAB), lr={Optim.ADAMW: 3e-3, Optim.SGD: 0.1},
                batch_sizes=(16, 32, 128), steps=400)
