"""The tiny GPT: config validation, shapes, technique flags, determinism, it learns."""
import math

import pytest

torch = pytest.importorskip("torch")

from lossguard.errors import ConfigError  # noqa: E402
from lossguard.demo.model import GPTConfig, TinyGPT, attention_logit_max  # noqa: E402

SMALL = dict(n_layer=2, n_embd=32, n_head=4, block_size=16)


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_config_collects_every_problem_and_names_fields():
    with pytest.raises(ConfigError) as err:
        GPTConfig(n_embd=30, n_head=4, dropout=1.0, init="xavier", embedding_grad_shrink=0.0)
    text = str(err.value)
    for field in ("n_embd", "dropout", "init", "embedding_grad_shrink"):
        assert field in text
    with pytest.raises(ConfigError, match="n_layer"):
        GPTConfig(n_layer=0)


def test_forward_shapes_and_initial_loss_is_uniform():
    torch.manual_seed(0)
    m = TinyGPT(GPTConfig(**SMALL))
    idx = torch.randint(0, 256, (3, 16))
    # targets independent of the inputs (the tied head favours repeating the input byte)
    logits, loss = m(idx, torch.randint(0, 256, (3, 16)))
    assert logits.shape == (3, 16, 256)
    # small init: predictions are near uniform over 256 bytes
    assert loss.item() == pytest.approx(math.log(256), abs=0.15)
    assert m(idx)[1] is None
    assert m.lm_head.weight is m.wte.weight  # tied
    logit_max = attention_logit_max(m)
    assert len(logit_max) == 2 and all(0 < v < 5 for v in logit_max)
    with pytest.raises(ValueError, match="block_size"):
        m(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize("flags", [
    dict(qk_layernorm=True), dict(qk_prescale=True), dict(embedding_layernorm=True),
    dict(embedding_grad_shrink=0.1), dict(z_loss=1e-4), dict(init="small_init"),
    dict(init="530b"), dict(init="megatron"), dict(bias=True, dropout=0.1),
])
def test_every_technique_flag_trains_a_step(flags):
    torch.manual_seed(0)
    m = TinyGPT(GPTConfig(**SMALL, **flags))
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    idx = torch.randint(0, 256, (2, 16))
    _, loss = m(idx, idx)
    loss.backward()
    opt.step()
    assert math.isfinite(loss.item())
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in m.parameters())


def test_z_loss_flag_adds_the_z_term():
    torch.manual_seed(0)
    a = TinyGPT(GPTConfig(**SMALL))
    b = TinyGPT(GPTConfig(**SMALL, z_loss=1e-2))
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 256, (2, 16))
    logits, la = a(idx, idx)
    _, lb = b(idx, idx)
    expected = 1e-2 * torch.logsumexp(logits, -1).square().mean()
    assert (lb - la).item() == pytest.approx(expected.item(), rel=1e-4)


def test_embedding_grad_shrink_scales_the_input_path_gradient():
    torch.manual_seed(0)
    a = TinyGPT(GPTConfig(**SMALL))
    b = TinyGPT(GPTConfig(**SMALL, embedding_grad_shrink=0.1))
    b.load_state_dict(a.state_dict())
    idx = torch.randint(0, 256, (2, 16))
    # untie so that only the input-embedding path reaches the embedding weight
    for m in (a, b):
        m.lm_head.weight = torch.nn.Parameter(m.wte.weight.detach().clone())
    a(idx, idx)[1].backward()
    b(idx, idx)[1].backward()
    assert torch.allclose(b.wte.weight.grad, 0.1 * a.wte.weight.grad, rtol=1e-4, atol=1e-8)
    assert torch.allclose(b.wpe.weight.grad, a.wpe.weight.grad, rtol=1e-4, atol=1e-8)


def test_deterministic_and_learns_the_corpus():
    from lossguard.demo.corpus import CorpusBatches, load_corpus

    data = CorpusBatches(load_corpus(), batch_size=8, seq_len=16, seed=0)
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        m = TinyGPT(GPTConfig(**SMALL))
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        losses = []
        for step in range(60):
            x, y = data.batch(step)
            opt.zero_grad()
            loss = m(x, y)[1]
            loss.backward()
            opt.step()
            losses.append(loss.item())
        runs.append(losses)
    assert runs[0] == runs[1]  # bitwise identical on CPU
    assert sum(runs[0][-10:]) / 10 < math.log(256) - 2.0  # far below uniform: it learnt
