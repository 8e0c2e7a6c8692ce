"""Adam-instability probes: bimodality statistic, epsilon trap, hooks on real optimizers."""
import math

import pytest

torch = pytest.importorskip("torch")

from lossguard.diagnose.adam_probe import AdamProbe, ProbeConfig  # noqa: E402
from lossguard.diagnose.bimodality import (bimodality_coefficient, is_bimodal,  # noqa: E402
                                           time_correlation)
from lossguard.errors import ConfigError  # noqa: E402


def test_bimodality_known_values():
    g = torch.Generator().manual_seed(0)
    normal = torch.randn(200_000, generator=g, dtype=torch.float64)
    uniform = torch.rand(200_000, generator=g, dtype=torch.float64)
    signs = torch.randint(0, 2, (200_000,), generator=g).double() * 2 - 1
    assert bimodality_coefficient(normal).item() == pytest.approx(1 / 3, abs=0.01)
    assert bimodality_coefficient(uniform).item() == pytest.approx(5 / 9, abs=0.01)
    assert bimodality_coefficient(signs).item() == pytest.approx(1.0, abs=0.01)
    # Adam in the sign-descent regime: updates near +-1 with a little spread -> flagged
    sign_descent = signs * (1 - 0.1 * torch.rand(200_000, generator=g, dtype=torch.float64))
    assert is_bimodal(sign_descent)
    # healthy, unimodal update distributions are not flagged
    assert not is_bimodal(0.3 * normal)
    assert not is_bimodal(torch.distributions.Laplace(0.0, 1.0).sample((50_000,)))


def test_time_correlation():
    a = torch.tensor([1.0, 2.0, -1.0])
    assert time_correlation(a, a).item() == pytest.approx(1.0)
    assert time_correlation(a, -a).item() == pytest.approx(-1.0)
    assert time_correlation(a, torch.zeros(3)).item() == 0.0


def test_eps_trap_fraction_equals_unseen_rows_exactly():
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 8)
    head = torch.nn.Linear(8, 3)
    params = dict(emb=emb.weight, head=head.weight)
    opt = torch.optim.AdamW(list(emb.parameters()) + [head.weight], lr=1e-2)
    probe = AdamProbe(opt, params.items())
    ids = torch.tensor([0, 1, 2, 3])  # rows 4..9 never seen: gradient exactly 0
    opt.zero_grad()
    head(emb(ids)).square().sum().backward()
    opt.step()
    # first Adam step: m_hat/sqrt(v_hat) = sign(g) on seen entries, a two-point law: bimodal
    assert probe.measure()["head"]["update_bimodality"] > 5 / 9
    assert probe.flags()["bimodal"] == ["head"]  # emb: 60% exact zeros plus +-1 is not flagged
    for _ in range(2):
        opt.zero_grad()
        head(emb(ids)).square().sum().backward()
        opt.step()
    stats = probe.measure()
    assert stats["emb"]["frac_below_eps"] == pytest.approx(6 / 10)
    assert stats["head"]["frac_below_eps"] == pytest.approx(0.0)
    assert stats["emb"]["grad_norm"] == pytest.approx(emb.weight.grad.norm().item(), rel=1e-6)
    assert probe.flags()["eps_trapped"] == ["emb"]
    assert [s for s, _ in probe.history["emb"]] == [0, 1, 2] and probe.steps == 3
    probe.remove()
    opt.step()
    assert probe.steps == 3


def test_update_ratio_and_every():
    torch.manual_seed(1)
    lin = torch.nn.Linear(5, 5, bias=False)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    probe = AdamProbe(opt, lin.named_parameters(), config=ProbeConfig(every=2))
    x = torch.randn(4, 5)
    w0 = lin.weight.detach().clone()
    opt.zero_grad()
    lin(x).sum().backward()
    g = lin.weight.grad.clone()
    opt.step()
    s = probe.measure()["weight"]
    assert s["update_ratio"] == pytest.approx((0.1 * g).norm().item() / w0.norm().item(), rel=1e-5)
    assert math.isnan(s["update_corr"])  # no previous update yet
    opt.step()  # step 1 is not measured (every=2)
    assert len(probe.history["weight"]) == 1


def test_eps_trap_rises_on_the_tiny_gpt():
    """Bytes the English corpus never contains: the rows of the tied embedding for those bytes get
    an ever smaller gradient (their softmax probability -> 0) until it is below Adam's eps. With
    eps = 1e-4 (large, so that 120 CPU steps suffice) the trapped fraction of ``wte`` climbs from a
    few percent to the share of byte values absent from the corpus."""
    from lossguard.demo.corpus import CorpusBatches, load_corpus
    from lossguard.demo.model import GPTConfig, TinyGPT

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(n_layer=1, n_embd=32, n_head=2, block_size=32))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, eps=1e-4)
    probe = AdamProbe(opt, model.named_parameters(), config=ProbeConfig(every=10))
    corpus = load_corpus()
    data = CorpusBatches(corpus, batch_size=8, seq_len=32, seed=0)
    for step in range(121):
        x, y = data.batch(step)
        opt.zero_grad()
        model(x, y)[1].backward()
        opt.step()
    fracs = [s["frac_below_eps"] for _, s in probe.history["wte.weight"]]
    assert len(fracs) == 13  # steps 0, 10, ..., 120
    absent = 1 - len(set(corpus)) / 256
    assert fracs[0] < 0.15
    # at least the absent bytes' rows are trapped; bytes seen only a handful of times join them
    assert absent - 0.02 <= fracs[-1] <= absent + 0.1
    assert "wte.weight" in probe.flags()["eps_trapped"]


def test_config_validation():
    with pytest.raises(ConfigError, match="every"):
        ProbeConfig(every=0)
    with pytest.raises(ConfigError, match="trap_fraction"):
        ProbeConfig(trap_fraction=1.5)
