"""Q/K pre-scaling vs post-scaling in half precision, and QK-LayerNorm bounding the logits."""
import math

import pytest

torch = pytest.importorskip("torch")

from lossguard.techniques.attention import (CausalSelfAttention, scores_postscaled,  # noqa: E402
                                            scores_prescaled)


def _qk(magnitude: float, d: int = 64, dtype=torch.float16):
    """Q and K whose entries are all about ``magnitude`` with random sign-aligned jitter."""
    g = torch.Generator().manual_seed(0)
    q = magnitude * (1 + 0.05 * torch.rand(2, 4, 8, d, generator=g))
    k = magnitude * (1 + 0.05 * torch.rand(2, 4, 8, d, generator=g))
    return q.to(dtype), k.to(dtype)


@pytest.mark.parametrize("dtype,magnitude", [
    # fp16: q.k = 64 * 40^2 ~ 1.1e5 > 65504 overflows, the logit q.k/8 ~ 1.4e4 fits.
    # Entries of ~40 are what Q/K reach once attention logits grow (Wortsman et al. 2023).
    (torch.float16, 40.0),
    # bf16 has fp32's range: q.k only overflows near 3.4e38, i.e. entries ~2.4e18. Unrealistic for
    # a healthy model, but the mechanism is the same; bf16's real problem is precision, not range.
    (torch.bfloat16, 2.4e18),
])
def test_postscaled_overflows_where_prescaled_does_not(dtype, magnitude):
    q, k = _qk(magnitude, dtype=dtype)
    post = scores_postscaled(q, k)
    pre = scores_prescaled(q, k)
    assert torch.isinf(post).any(), "the unscaled product should overflow"
    assert torch.isfinite(pre).all(), "the pre-scaled product must not overflow"
    exact = scores_postscaled(q.double(), k.double())
    assert torch.isfinite(exact).all()
    assert torch.allclose(pre.double(), exact, rtol=2e-2)  # half precision: ~3 significant digits


def test_prescaled_equals_postscaled_in_fp32_with_mask():
    torch.manual_seed(0)
    q, k = torch.randn(3, 5, 16), torch.randn(3, 5, 16)
    mask = torch.full((5, 5), float("-inf")).triu(1)
    a = scores_postscaled(q, k) + mask
    b = scores_prescaled(q, k, mask)
    assert torch.equal(torch.isinf(a), torch.isinf(b))
    fin = torch.isfinite(a)
    assert torch.allclose(a[fin], b[fin], rtol=1e-5, atol=1e-6)


def test_attention_module_prescale_matches_plain_output():
    torch.manual_seed(0)
    plain = CausalSelfAttention(32, 4)
    pre = CausalSelfAttention(32, 4, qk_prescale=True)
    pre.load_state_dict(plain.state_dict())
    x = torch.randn(2, 10, 32)
    assert torch.allclose(plain(x), pre(x), rtol=1e-5, atol=1e-6)
    assert plain.last_max_logit.item() == pytest.approx(pre.last_max_logit.item(), rel=1e-5)


def test_qk_layernorm_bounds_logits_when_weights_blow_up():
    torch.manual_seed(0)
    x = torch.randn(2, 16, 32)
    plain = CausalSelfAttention(32, 2)
    normed = CausalSelfAttention(32, 2, qk_layernorm=True)
    with torch.no_grad():
        normed.c_attn.weight.copy_(plain.c_attn.weight)
        plain.c_attn.weight.mul_(30.0)
        normed.c_attn.weight.mul_(30.0)
    plain(x), normed(x)
    d = 16
    # LayerNormed q, k have norm sqrt(d) (unit gains), so q.k/sqrt(d) <= sqrt(d) by Cauchy-Schwarz
    assert normed.last_max_logit.item() <= math.sqrt(d) + 1e-4
    assert plain.last_max_logit.item() > 10 * math.sqrt(d)
