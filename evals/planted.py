"""A dataset with planted bad samples and a tiny model that really trains on it: the subject of the
sample-naming tests and benchmark.

:class:`PlantedBags` is a bag-of-tokens classification task of any size (every sample, with its
label, is a pure function of ``(seed, index)``; nothing is held in memory): class ``c`` draws 40%
of its tokens from its own 48 tokens of a 255-token vocabulary, the rest at random. A few indices
are *planted* with one of the :class:`Poison` kinds. :class:`BagClassifier` (sum-pooled embeddings,
one hidden ReLU layer) learns the task to a loss near 0.015 in ~150 steps of 32 samples.

Sum pooling makes the poisons bite the way they do in real models with unnormalised pooling or
long-sequence accumulations: thousands of tokens give an activation ~100x the usual one.

Batches are ``(ids, tokens[B, L], labels[B])`` (token 0 pads); :func:`per_row_loss` is the
per-sample loss convention the guard's naming needs (``reduction='none'``).
"""
from __future__ import annotations

import enum

import numpy as np

VOCAB, CLASSES, OWN = 256, 4, 48


class Poison(enum.Enum):
    """How a planted sample is bad."""

    RANDOM_BYTES = "random_bytes"
    """3000 tokens drawn uniformly from the whole vocabulary (a binary file in a text corpus)."""
    REPEATED_TOKEN = "repeated_token"
    """One uninformative token repeated 4000 times."""
    FLIPPED_LABEL = "flipped_label"
    """An ordinary sample of class ``c`` labelled ``(c + 2) % 4``."""


class PlantedBags:
    """``dataset[i] -> (i, tokens int64[L], label)``, deterministic per ``(seed, i)``.

    Args:
        n: number of samples.
        seed: the data's seed.
        planted: ``{index: Poison}``.
    """

    def __init__(self, n: int, *, seed: int = 0, planted: dict[int, Poison] | None = None) -> None:
        self.n, self.seed, self.planted = int(n), int(seed), dict(planted or {})

    def __len__(self) -> int:
        return self.n

    def clean(self, i: int) -> tuple[np.ndarray, int]:
        """The ordinary sample at ``i`` (what index ``i`` holds when it is not planted)."""
        rng = np.random.default_rng([self.seed, int(i)])
        label = int(rng.integers(CLASSES))
        length = int(rng.integers(16, 49))
        own = rng.integers(1 + label * OWN, 1 + (label + 1) * OWN, length)
        anyt = rng.integers(1, VOCAB, length)
        return np.where(rng.random(length) < 0.4, own, anyt).astype(np.int64), label

    def __getitem__(self, i: int):
        i = int(i)
        kind = self.planted.get(i)
        tokens, label = self.clean(i)
        if kind is Poison.RANDOM_BYTES:
            rng = np.random.default_rng([self.seed, i, 1])
            tokens, label = rng.integers(1, VOCAB, 3000).astype(np.int64), int(rng.integers(CLASSES))
        elif kind is Poison.REPEATED_TOKEN:
            rng = np.random.default_rng([self.seed, i, 2])
            tok = int(rng.integers(1 + CLASSES * OWN, VOCAB))  # a token of no class
            tokens, label = np.full(4000, tok, dtype=np.int64), int(rng.integers(CLASSES))
        elif kind is Poison.FLIPPED_LABEL:
            label = (label + 2) % CLASSES
        return i, tokens, label


def describe(data: PlantedBags, index: int) -> str:
    """What sample ``index`` is, in a few words (the ``render`` a person reads in the report):
    its length, label and most frequent token, e.g. ``"4000 tokens, label 1, token 211 x4000"``."""
    _, tokens, label = data[index]
    values, counts = np.unique(tokens, return_counts=True)
    top = int(np.argmax(counts))
    return f"{len(tokens)} tokens, label {label}, token {int(values[top])} x{int(counts[top])}"


def pad_collate(items):
    """``[(i, tokens, label)] -> (ids int64[B], tokens int64[B, Lmax] (0-padded), labels int64[B])``."""
    import torch

    width = max(len(t) for _, t, _ in items)
    tok = torch.zeros((len(items), width), dtype=torch.int64)
    for r, (_, t, _) in enumerate(items):
        tok[r, :len(t)] = torch.from_numpy(t)
    return (torch.tensor([i for i, _, _ in items], dtype=torch.int64), tok,
            torch.tensor([y for _, _, y in items], dtype=torch.int64))


def bag_classifier(seed: int = 0, dim: int = 32, hidden: int = 64, dropout: float = 0.0):
    """Sum-pooled token embeddings -> ReLU layer [-> dropout] -> class logits (torch's global RNG
    seeded first; dropout makes exact resume depend on the RNG being restored)."""
    import torch

    torch.manual_seed(seed)

    class BagClassifier(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.EmbeddingBag(VOCAB, dim, mode="sum", padding_idx=0)
            self.emb.weight.data.mul_(0.1)
            self.hidden = torch.nn.Linear(dim, hidden)
            self.drop = torch.nn.Dropout(dropout)
            self.out = torch.nn.Linear(hidden, CLASSES)

        def forward(self, tokens):
            return self.out(self.drop(torch.relu(self.hidden(self.emb(tokens)))))

    return BagClassifier()


def per_row_loss(model, batch):
    """Each row's cross-entropy (the naming convention: ``reduction='none'``)."""
    import torch

    return torch.nn.functional.cross_entropy(model(batch[1]), batch[2], reduction="none")


def batch_loss(model, batch):
    """The training loss: the mean of :func:`per_row_loss`."""
    return per_row_loss(model, batch).mean()


def plant(sampler, placements: list[tuple[int, int, Poison]]) -> dict[int, Poison]:
    """``{index: kind}`` for ``(batch position, row, kind)`` placements in ``sampler``'s order (so
    the run meets each planted sample at a chosen step)."""
    return {sampler.global_batch_ids(p)[r]: k for p, r, k in placements}


def score_naming(spikes, suspects, planted) -> dict:
    """Recall and precision of the names against the planted truth.

    Args:
        spikes: ``(step, batch_index, ids)`` of every withheld step (the ids its batch held).
        suspects: the guard's ``suspects`` records.
        planted: the planted sample ids.

    Returns:
        ``{"recall", "precision", "precision_planted", "caught", "missed", "false", "natural"}``:
        recall over the planted samples that sat in a withheld batch (the spikes they could have
        caused); precision over every named sample (a name in a spike with nothing planted counts
        as false, though clean data has its own single-sample spikes); ``precision_planted`` over
        the names given in spikes whose batch held a planted sample; ``natural``: ``(step, id,
        share)`` of the names given in spikes with nothing planted.
    """
    planted = set(planted)
    due = {i for _, _, ids in spikes for i in ids if i in planted}
    steps_with_plants = {s for s, _, ids in spikes if set(ids) & planted}
    named = {s["id"] for r in suspects for s in r.get("suspects", []) if "id" in s}
    in_planted = [s["id"] for r in suspects if r["step"] in steps_with_plants
                  for s in r.get("suspects", []) if "id" in s]
    natural = [(r["step"], s["id"], s["share"]) for r in suspects if r["step"] not in steps_with_plants
               for s in r.get("suspects", []) if "id" in s]
    caught = due & named
    return {"recall": len(caught) / len(due) if due else 1.0,
            "precision": len(named & planted) / len(named) if named else 1.0,
            "precision_planted": sum(i in planted for i in in_planted) / len(in_planted) if in_planted else 1.0,
            "caught": sorted(caught), "missed": sorted(due - named), "false": sorted(named - planted),
            "natural": natural}
