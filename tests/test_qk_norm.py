"""Drop-in QK-LayerNorm and z-loss (issue 20) on models lossguard did not build."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from lossguard.errors import LossguardError  # noqa: E402
from lossguard.guard.attention_probe import find_attention  # noqa: E402
from lossguard.techniques.qk_norm import ZLossTap, add_qk_norm, qk_layernorm  # noqa: E402
from lossguard.techniques.z_loss import z_loss  # noqa: E402


def _gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_embd=32, n_head=4, n_layer=2, n_positions=16, vocab_size=64,
                                  attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
    return transformers.GPT2LMHeadModel(cfg)


def test_qk_layernorm_function_bounds_logits():
    q, k = torch.randn(2, 4, 8, 16) * 50, torch.randn(2, 4, 8, 16) * 50
    qn, kn = qk_layernorm(q, k)
    logits = qn @ kn.transpose(-2, -1) / 16 ** 0.5
    assert logits.abs().max() <= 16 ** 0.5 + 1e-3  # |q.k| <= |q||k| = d after LayerNorm
    assert torch.allclose(qn.mean(-1), torch.zeros(2, 4, 8), atol=1e-4)


def test_add_qk_norm_to_hf_gpt2_keeps_logits_bounded_and_trains():
    model = _gpt2()
    names = add_qk_norm(model)
    assert len(names) == 2
    probes = find_attention(model)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randint(0, 64, (4, 16))
    with torch.no_grad():  # blow up the query/key weights: without the norm the logits would explode
        for b in model.transformer.h:
            b.attn.c_attn.weight.mul_(30)
    model.train()
    losses = []
    for _ in range(5):
        out = model(x, labels=x)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(out.loss.detach()))
    # normalised q and k: the largest logit is at most head_dim * gain^2 / sqrt(head_dim) ~ sqrt(8)
    assert max(float(p.head_max().max()) for p in probes) < 4 * 8 ** 0.5
    assert losses[-1] < losses[0]
    assert n_params == sum(p.numel() for p in _gpt2().parameters()) + 2 * 2 * 2 * 8  # 2 layers x q,k x (w,b) x 8


def test_add_qk_norm_q_proj_k_proj_modules():
    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.num_heads, self.head_dim = 2, 4
            self.q_proj, self.k_proj = torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)  # grouped-query k

        def forward(self, x):
            return self.q_proj(x), self.k_proj(x)

    m = torch.nn.Sequential(Attn())
    assert add_qk_norm(m) == ["0"]
    q, k = m(torch.randn(3, 5, 8) * 100)
    assert torch.allclose(q.view(3, 5, 2, 4).mean(-1), torch.zeros(3, 5, 2), atol=1e-4)
    assert torch.allclose(k.mean(-1), torch.zeros(3, 5), atol=1e-4)


def test_add_qk_norm_refuses_a_model_without_attention():
    with pytest.raises(LossguardError, match="no attention"):
        add_qk_norm(torch.nn.Linear(3, 3))


def test_z_loss_tap_matches_the_function():
    model = _gpt2()
    tap = ZLossTap(model.lm_head, coef=1e-3)
    x = torch.randint(0, 64, (2, 16))
    out = model(x)
    term = tap.pop()
    assert float(term) == pytest.approx(float(z_loss(out.logits, 1e-3)), rel=1e-5)
    assert float(tap.pop()) == 0.0
    (out.logits.mean() + term).backward()  # differentiable
    assert model.lm_head.weight.grad is not None
