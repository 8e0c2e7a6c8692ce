"""eps-free AdamW and Adam-atan2 against stock AdamW."""
import pytest

torch = pytest.importorskip("torch")

from lossguard.errors import ConfigError  # noqa: E402
from lossguard.techniques.adam_eps_free import AdamAtan2, AdamWEpsFree  # noqa: E402


def _embedding_step(make_opt, steps=3):
    """Train an embedding on ids 0..4 only: rows 5..9 get gradients that are exactly zero."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 4)
    opt = make_opt(emb.parameters())
    ids = torch.tensor([0, 1, 2, 3, 4])
    for _ in range(steps):
        opt.zero_grad()
        emb(ids).square().sum().backward()
        assert torch.all(emb.weight.grad[5:] == 0)
        opt.step()
    return emb.weight.detach()


def _stock_paths():
    paths = {"plain": dict(foreach=False), "foreach": dict(foreach=True)}
    try:  # fused AdamW on CPU exists since torch 2.4
        w = torch.nn.Parameter(torch.ones(2))
        w.grad = torch.ones(2)
        torch.optim.AdamW([w], fused=True).step()
        paths["fused"] = dict(fused=True)
    except (RuntimeError, TypeError):
        pass
    return paths


@pytest.mark.parametrize("path", sorted(_stock_paths()))
def test_stock_adamw_eps0_writes_nan_into_unseen_rows(path):
    kw = _stock_paths()[path]
    w = _embedding_step(lambda p: torch.optim.AdamW(p, lr=1e-2, eps=0.0, **kw))
    assert torch.isnan(w[5:]).all(), f"stock AdamW(eps=0, {kw}) should turn zero-grad rows NaN"
    assert torch.isfinite(w[:5]).all()


def test_fused_path_was_checked_on_this_torch():
    assert "fused" in _stock_paths(), "fused AdamW on CPU expected in torch >= 2.4"


def test_eps_free_keeps_unseen_rows_and_matches_adamw():
    ours = _embedding_step(lambda p: AdamWEpsFree(p, lr=1e-2, weight_decay=0.01))
    ref = _embedding_step(lambda p: torch.optim.AdamW(p, lr=1e-2, eps=1e-8, weight_decay=0.01,
                                                       foreach=False))
    assert torch.isfinite(ours).all()
    # unseen rows only decay: w * (1 - lr * wd) ** steps, exactly like AdamW
    torch.manual_seed(0)
    w0 = torch.nn.Embedding(10, 4).weight.detach()
    assert torch.allclose(ours[5:], w0[5:] * (1 - 1e-2 * 0.01) ** 3, rtol=1e-6)
    assert torch.allclose(ours, ref, rtol=1e-5, atol=1e-6)


def test_eps_free_matches_adamw_over_a_longer_run():
    torch.manual_seed(3)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    finals = []
    for make in (lambda p: AdamWEpsFree(p, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1),
                 lambda p: torch.optim.AdamW(p, lr=3e-3, betas=(0.9, 0.95), eps=1e-8,
                                             weight_decay=0.1)):
        torch.manual_seed(4)
        net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        opt = make(net.parameters())
        for _ in range(50):
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()
        finals.append(torch.cat([p.detach().flatten() for p in net.parameters()]))
    assert torch.allclose(finals[0], finals[1], rtol=1e-4, atol=1e-5)


def _train_scaled(make_opt, scale):
    torch.manual_seed(5)
    x, y = torch.randn(32, 6), torch.randn(32, 1)
    torch.manual_seed(6)
    net = torch.nn.Linear(6, 1)
    opt = make_opt(net.parameters())
    for _ in range(20):
        opt.zero_grad()
        (scale * torch.nn.functional.mse_loss(net(x), y)).backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in net.parameters()])


def test_atan2_is_invariant_to_gradient_scale_and_adam_is_not():
    mk = lambda p: AdamAtan2(p, lr=1e-2, weight_decay=0.0)  # noqa: E731
    base = _train_scaled(mk, 1.0)
    for scale in (1e-12, 1e-6, 1e6):
        assert torch.allclose(_train_scaled(mk, scale), base, rtol=1e-5, atol=1e-6), scale
    adam = lambda p: torch.optim.AdamW(p, lr=1e-2, eps=1e-8, weight_decay=0.0)  # noqa: E731
    # gradients ~1e-12 sit far below eps: Adam's update collapses (the epsilon trap)
    assert not torch.allclose(_train_scaled(adam, 1e-12), _train_scaled(adam, 1.0), atol=1e-3)


def test_atan2_zero_gradient_gives_zero_update_and_is_bounded():
    w = _embedding_step(lambda p: AdamAtan2(p, lr=1e-2, weight_decay=0.0))
    torch.manual_seed(0)
    w0 = torch.nn.Embedding(10, 4).weight.detach()
    assert torch.equal(w[5:], w0[5:])  # atan2(0, 0) == 0: no eps, no NaN, no step
    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.tensor([1e15, -1e-15, 5.0])  # squares stay inside float32
    AdamAtan2([p], lr=1.0, weight_decay=0.0, a=1.0).step()
    # first step: m_hat = g, sqrt(v_hat) = |g| -> atan2(g, |g|) = +-pi/4 whatever |g| is
    assert torch.allclose(p.detach(), -torch.tensor([1.0, -1.0, 1.0]) * torch.pi / 4)


def test_bad_hyperparameters_name_the_field():
    w = [torch.nn.Parameter(torch.zeros(1))]
    with pytest.raises(ConfigError, match="betas"):
        AdamWEpsFree(w, betas=(0.9, 1.0))
    with pytest.raises(ConfigError, match="'b'"):
        AdamAtan2(w, b=0.0)
