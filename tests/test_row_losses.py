"""The shipped per-sample losses agree row by row with the mean losses the models train on."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from lossguard.guard.row_losses import IGNORE_INDEX, causal_lm_row_loss, classification_row_loss  # noqa: E402


def test_classification_rows_average_to_the_batch_loss():
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    x, y = torch.randn(8, 5), torch.randint(0, 3, (8,))
    rows = classification_row_loss(model, (x, y))
    assert rows.shape == (8,)
    torch.testing.assert_close(rows.mean(), F.cross_entropy(model(x), y))
    torch.testing.assert_close(rows[2], F.cross_entropy(model(x[2:3]), y[2:3]))


class _TinyCausalLM(torch.nn.Module):
    """Embedding + linear head, called as ``model(input_ids=...)`` returning ``.logits`` like HF."""

    def __init__(self, vocab: int = 11):
        super().__init__()
        self.emb, self.head = torch.nn.Embedding(vocab, 6), torch.nn.Linear(6, vocab)

    def forward(self, input_ids):
        return type("Out", (), {"logits": self.head(self.emb(input_ids))})()


def test_causal_lm_rows_skip_ignored_labels_and_match_each_rows_own_loss():
    torch.manual_seed(1)
    model = _TinyCausalLM()
    ids = torch.randint(0, 11, (3, 7))
    labels = ids.clone()
    labels[1, 4:] = IGNORE_INDEX  # a padded row
    labels[2, :] = IGNORE_INDEX  # a row with nothing to learn
    rows = causal_lm_row_loss(model, {"input_ids": ids, "labels": labels})
    for r in range(2):
        logits = model(input_ids=ids[r:r + 1]).logits[:, :-1]
        own = F.cross_entropy(logits.reshape(-1, 11), labels[r:r + 1, 1:].reshape(-1), ignore_index=IGNORE_INDEX)
        torch.testing.assert_close(rows[r], own)
    assert rows[2].item() == 0.0
