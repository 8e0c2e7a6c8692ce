"""Teacher-labelled synthetic data for the zoo: a fixed random network labels random inputs.

Every dataset is a function of its ``data_seed`` alone (the teacher, the inputs and the held-out
set), so the model seed of a run changes its initialisation and data order, never the task. Labels
are the teacher's argmax: learnable exactly by a big enough student, with a floor of zero, so a
held-out loss difference of 2% is a real difference. The language families read the demo's
public-domain corpus instead (:func:`lossguard.demo.corpus.load_corpus`), as fixed windows.

Each dataset is map-style (``dataset[i] -> (x, y)``) so the README's loop,
``DataLoader(dataset, batch_sampler=ResumableSampler(...))``, reads it unchanged.
"""
from __future__ import annotations

import torch
from torch import nn

N_TRAIN = 4096
"""Training samples of every synthetic task (a few epochs at the zoo's sizes)."""
N_HELD_OUT = 1024
"""Held-out samples; evaluated in batches of 256."""
N_CLASSES = 8
"""Classes of every classification task."""


class TensorPairs(torch.utils.data.Dataset):
    """``(x[i], y[i])`` from two tensors of equal length."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def batches(self, size: int = 256) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The whole set in fixed consecutive batches (for held-out evaluation)."""
        return [(self.x[k:k + size], self.y[k:k + size]) for k in range(0, len(self.x), size)]


def _label(teacher: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return teacher(x).argmax(-1)


def _split(x: torch.Tensor, y: torch.Tensor) -> tuple[TensorPairs, TensorPairs]:
    return TensorPairs(x[:N_TRAIN], y[:N_TRAIN]), TensorPairs(x[N_TRAIN:], y[N_TRAIN:])


def vectors(data_seed: int = 0, *, dim: int = 16) -> tuple[TensorPairs, TensorPairs]:
    """Gaussian vectors labelled by a random 2-layer tanh MLP (width 32): (train, held-out)."""
    g = torch.Generator().manual_seed(10_007 + data_seed)
    x = torch.randn(N_TRAIN + N_HELD_OUT, dim, generator=g)
    w1 = torch.randn(dim, 32, generator=g) / dim ** 0.5
    w2 = torch.randn(32, N_CLASSES, generator=g) / 32 ** 0.5
    teacher = lambda v: torch.tanh(v @ w1 * 2.0) @ w2  # noqa: E731 -- a fixed function, not a module
    return _split(x, _label(teacher, x))


def images(data_seed: int = 0, *, side: int = 12) -> tuple[TensorPairs, TensorPairs]:
    """Smoothed noise images (1 x side x side) labelled by a random conv net: (train, held-out)."""
    g = torch.Generator().manual_seed(20_011 + data_seed)
    x = torch.randn(N_TRAIN + N_HELD_OUT, 1, side, side, generator=g)
    # Smooth the noise a little so neighbouring pixels correlate, as in images.
    x = nn.functional.avg_pool2d(nn.functional.pad(x, (1, 1, 1, 1), mode="reflect"), 3, stride=1) * 2.5
    k1 = torch.randn(6, 1, 3, 3, generator=g) / 3.0
    w = torch.randn(6 * 4 * 4, N_CLASSES, generator=g) / (6 * 16) ** 0.5

    def teacher(v):
        h = torch.relu(nn.functional.conv2d(v, k1, padding=1))
        h = nn.functional.adaptive_avg_pool2d(h, 4).flatten(1)
        return h @ w * 3.0
    return _split(x, _label(teacher, x))


def sequences(data_seed: int = 0, *, length: int = 16, vocab: int = 16) -> tuple[TensorPairs, TensorPairs]:
    """Random token sequences labelled by a random tanh RNN's last state: (train, held-out).

    The label depends on token order (an RNN teacher), so a bag-of-tokens model cannot fit it.
    """
    g = torch.Generator().manual_seed(30_013 + data_seed)
    x = torch.randint(vocab, (N_TRAIN + N_HELD_OUT, length), generator=g)
    emb = torch.randn(vocab, 24, generator=g)
    wh = torch.randn(24, 24, generator=g) * (0.9 / 24 ** 0.5)
    wo = torch.randn(24, N_CLASSES, generator=g) / 24 ** 0.5
    h = torch.zeros(len(x), 24)
    for t in range(length):
        h = torch.tanh(emb[x[:, t]] + h @ wh)
    return _split(x, (h @ wo).argmax(-1))


class CorpusWindows(torch.utils.data.Dataset):
    """Fixed windows of ``length + 1`` bytes of the demo corpus; ``[i] -> (x, y)`` next-byte pairs."""

    def __init__(self, tokens: torch.Tensor, starts: torch.Tensor, length: int) -> None:
        self.tokens, self.starts, self.length = tokens, starts, length

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i):
        s = int(self.starts[i])
        seq = self.tokens[s:s + self.length + 1]
        return seq[:-1], seq[1:]

    def batches(self, size: int = 64) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The whole set in fixed consecutive batches (for held-out evaluation)."""
        out = []
        for k in range(0, len(self), size):
            pairs = [self[i] for i in range(k, min(k + size, len(self)))]
            out.append((torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])))
        return out


def corpus(data_seed: int = 0, *, length: int = 32, n_held_out: int = 256) -> tuple[CorpusWindows, CorpusWindows]:
    """Byte windows of the demo's public-domain corpus: training from the first 90%, held-out from the rest."""
    from lossguard.demo.corpus import load_corpus

    tokens = torch.frombuffer(bytearray(load_corpus()), dtype=torch.uint8).long()
    n_val = len(tokens) // 10
    train, val = tokens[:-n_val], tokens[-n_val:]
    g = torch.Generator().manual_seed(40_009 + data_seed)
    starts = torch.randint(len(train) - length - 1, (N_TRAIN,), generator=g)
    val_starts = torch.linspace(0, len(val) - length - 2, n_held_out).long()
    return CorpusWindows(train, starts, length), CorpusWindows(val, val_starts, length)
