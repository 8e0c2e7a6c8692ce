"""PaLM z-loss: value and gradient against a hand computation."""
import math

import pytest

torch = pytest.importorskip("torch")

from lossguard.techniques.z_loss import z_loss  # noqa: E402


def test_value_and_gradient_by_hand():
    rows = [[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]
    logits = torch.tensor(rows, requires_grad=True)
    coef = 1e-4
    out = z_loss(logits, coef)
    log_z = [math.log(sum(math.exp(v) for v in r)) for r in rows]
    assert out.item() == pytest.approx(coef * (log_z[0] ** 2 + log_z[1] ** 2) / 2, rel=1e-6)
    out.backward()
    for i, r in enumerate(rows):
        z = sum(math.exp(v) for v in r)
        for j, v in enumerate(r):
            # d/dl_j of coef*logZ^2/N = 2*coef*logZ*softmax_j / N, N = 2 rows
            expected = 2 * coef * log_z[i] * math.exp(v) / z / 2
            assert logits.grad[i, j].item() == pytest.approx(expected, rel=1e-5)


def test_zero_when_normaliser_is_one_and_mask_excludes_positions():
    v = 5
    logits = torch.full((1, 2, v), -math.log(v))  # softmax uniform with Z == 1 -> log Z == 0
    assert z_loss(logits).item() == pytest.approx(0.0, abs=1e-10)
    big = torch.tensor([[[0.0, 0.0], [100.0, 100.0]]])
    mask = torch.tensor([[False, True]])
    assert z_loss(big, 1.0, ignore_mask=mask).item() == pytest.approx(math.log(2) ** 2, rel=1e-6)
