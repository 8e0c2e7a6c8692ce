"""Embedding LayerNorm and GLM-130B's embedding gradient shrink."""
import pytest

torch = pytest.importorskip("torch")

from lossguard.errors import ConfigError  # noqa: E402
from lossguard.techniques.embedding_grad_shrink import (EmbeddingGradShrink,  # noqa: E402
                                                        shrink_embedding_gradient)
from lossguard.techniques.embedding_norm import EmbeddingLayerNorm  # noqa: E402


def test_embedding_layernorm_normalises_rows_of_any_scale():
    torch.manual_seed(0)
    m = EmbeddingLayerNorm(50, 32)
    with torch.no_grad():
        m.embedding.weight[7] *= 1000.0  # one exploded row
    out = m(torch.tensor([[7, 3, 9]]))
    assert out.shape == (1, 3, 32)
    assert torch.allclose(out.mean(-1), torch.zeros(1, 3), atol=1e-5)
    assert torch.allclose(out.var(-1, unbiased=False), torch.ones(1, 3), atol=1e-3)
    out.sum().backward()
    assert m.embedding.weight.grad is not None and m.norm.weight.grad is not None


@pytest.mark.parametrize("alpha", [0.1, 0.37, 1.0])
def test_shrink_forward_unchanged_gradient_scaled_exactly(alpha):
    torch.manual_seed(1)
    emb = torch.nn.Embedding(20, 16)
    idx = torch.randint(0, 20, (4, 8))
    upstream = torch.randn(4, 8, 16)

    ref = emb(idx)
    (ref * upstream).sum().backward()
    g_ref = emb.weight.grad.clone()
    emb.weight.grad = None

    out = shrink_embedding_gradient(emb(idx), alpha)
    # alpha*x + (1-alpha)*x rounds to x within one ulp
    assert torch.allclose(out, ref, rtol=0, atol=4 * torch.finfo(torch.float32).eps * ref.abs().max().item())
    (out * upstream).sum().backward()
    # rows hit by several positions sum their gradients; rounding of that sum may differ by an ulp
    assert torch.allclose(emb.weight.grad, g_ref * alpha, rtol=1e-6, atol=1e-7)
    # on a leaf the factor is exact: d(out)/d(x) = alpha
    x = torch.randn(5, 3, requires_grad=True)
    (shrink_embedding_gradient(x, alpha) * upstream[0, :5, :3]).sum().backward()
    assert torch.equal(x.grad, upstream[0, :5, :3] * alpha)


def test_shrink_module_and_validation():
    x = torch.randn(3, 4, requires_grad=True)
    EmbeddingGradShrink(0.1)(x).sum().backward()
    assert torch.allclose(x.grad, torch.full((3, 4), 0.1))
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ConfigError, match="embedding_grad_shrink"):
            EmbeddingGradShrink(bad)
