"""Zoo family: an LSTM classifier of teacher-labelled sequences (HELD OUT of all guard tuning)."""
from __future__ import annotations

import torch
from torch import nn

from evals.zoo import data
from evals.zoo.family import DROPOUT, Family, classify_loss, garbage_tokens
from evals.zoo.spec import Optim

VOCAB, LENGTH, WIDTH = 16, 16, 32


class LSTMClassifier(nn.Module):
    """Embedding, dropout, one LSTM layer, linear head on the last hidden state."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.drop = nn.Dropout(DROPOUT)
        self.rnn = nn.LSTM(WIDTH, WIDTH, batch_first=True)
        self.head = nn.Linear(WIDTH, data.N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, N_CLASSES)`` of token ids ``x`` ``(B, LENGTH)``."""
        out, _ = self.rnn(self.drop(self.tok(x)))
        return self.head(self.drop(out[:, -1]))


FAMILY = Family(name="lstm", tuned=False, model=LSTMClassifier,
                data=lambda: data.sequences(length=LENGTH, vocab=VOCAB), loss=classify_loss,
                garbage=garbage_tokens(VOCAB), lr={Optim.ADAMW: 5e-3, Optim.SGD: 0.1},
                batch_sizes=(16, 32, 128), steps=400)
