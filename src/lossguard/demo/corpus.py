"""The demo's data: the shipped public-domain corpus, and deterministic batches drawn from it.

The batch of step ``s`` depends only on ``(seed, s)``, so a run that skips or repeats steps (a
guard's rollback) sees exactly the batch any other run sees at that step. A :class:`Pocket` replaces
the batches of some steps with garbage (random bytes, one repeated byte, or foreign script).
"""
from __future__ import annotations

from importlib import resources

from .scenario import Pocket


def load_corpus() -> bytes:
    """The shipped public-domain corpus as bytes, without its ``#`` header."""
    raw = resources.files("lossguard.demo").joinpath("corpus.txt").read_bytes()
    lines = raw.split(b"\n")
    i = 0
    while i < len(lines) and lines[i].startswith(b"#"):
        i += 1
    return b"\n".join(lines[i:]).lstrip(b"\n")


class CorpusBatches:
    """Deterministic batches from the corpus: the batch of a step depends only on (seed, step).

    Args:
        data: the corpus bytes; the last ``val_frac`` is held out.
        batch_size: sequences per batch.
        seq_len: tokens per sequence.
        seed: batch-order seed.
        pocket: optional garbage pocket.
        val_frac: held-out fraction at the end of the corpus.
    """

    def __init__(self, data: bytes, *, batch_size: int, seq_len: int, seed: int,
                 pocket: Pocket | None = None, val_frac: float = 0.1) -> None:
        import torch

        tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
        n_val = int(len(tokens) * val_frac)
        self.train, self.val = tokens[:-n_val], tokens[-n_val:]
        self.batch_size, self.seq_len, self.seed, self.pocket = batch_size, seq_len, seed, pocket

    def _gen(self, step: int, salt: int = 0):
        import torch

        return torch.Generator().manual_seed((self.seed * 1_000_003 + step) * 7 + salt)

    def batch(self, step: int):
        """``(x, y)`` of shape ``(batch_size, seq_len)`` for ``step`` (garbage inside the pocket)."""
        import torch

        g = self._gen(step)
        if self.pocket is not None and self.pocket.covers(step):
            seq = _garbage(self.pocket.kind, self.batch_size, self.seq_len + 1, g)
        else:
            ix = torch.randint(len(self.train) - self.seq_len - 1, (self.batch_size,), generator=g)
            seq = torch.stack([self.train[i:i + self.seq_len + 1] for i in ix.tolist()])
        return seq[:, :-1], seq[:, 1:]

    def val_batches(self, n: int):
        """``n`` fixed held-out batches (the same for every run of every scenario)."""
        import torch

        g = torch.Generator().manual_seed(987_654_321)
        out = []
        for _ in range(n):
            ix = torch.randint(len(self.val) - self.seq_len - 1, (self.batch_size,), generator=g)
            seq = torch.stack([self.val[i:i + self.seq_len + 1] for i in ix.tolist()])
            out.append((seq[:, :-1], seq[:, 1:]))
        return out


def _garbage(kind: str, b: int, t: int, g):
    import torch

    if kind == "random_bytes":
        return torch.randint(0, 256, (b, t), generator=g)
    if kind == "repeat":
        tok = torch.randint(0, 256, (b, 1), generator=g)
        return tok.expand(b, t).clone()
    # "foreign": random lowercase Cyrillic (U+0430..U+044F) and Greek (U+03B1..U+03C9) letters and
    # spaces, UTF-8 encoded: 2-byte sequences the English corpus never contains.
    letters = [chr(c) for c in range(0x430, 0x450)] + [chr(c) for c in range(0x3B1, 0x3CA)] + [" "] * 8
    rows = []
    for _ in range(b):
        idx = torch.randint(0, len(letters), (t,), generator=g).tolist()
        enc = "".join(letters[i] for i in idx).encode("utf-8")[:t]
        rows.append(torch.tensor(list(enc), dtype=torch.long))
    return torch.stack(rows)
