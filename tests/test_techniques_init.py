"""Init std formulas and apply_init: the drawn weights have the std the scheme promises."""
import math

import pytest

torch = pytest.importorskip("torch")

from lossguard.errors import ConfigError  # noqa: E402
from lossguard.techniques.init import (apply_init, depth_scaled, std_530b,  # noqa: E402
                                       std_small_init)


def test_formulas_against_hand_values():
    # H = 12288 (MT-NLG 530B's width): sqrt(1/36864) = 1/192
    assert std_530b(12288) == pytest.approx(1 / 192, rel=1e-12)
    # H = 1000: sqrt(2/5000) = sqrt(4e-4) = 0.02
    assert std_small_init(1000) == pytest.approx(0.02, rel=1e-12)
    assert depth_scaled(0.02, 8) == pytest.approx(0.02 / 4, rel=1e-12)


class _Net(torch.nn.Module):
    def __init__(self, h):
        super().__init__()
        self.emb = torch.nn.Embedding(300, h)
        self.c_fc = torch.nn.Linear(h, 4 * h)
        self.c_proj = torch.nn.Linear(4 * h, h)
        self.ln = torch.nn.LayerNorm(h)


@pytest.mark.parametrize("scheme", ["normal", "megatron", "small_init", "530b"])
def test_apply_init_std_within_sampling_error(scheme):
    h, layers = 256, 6
    net = _Net(h)
    with torch.no_grad():
        net.ln.weight.fill_(3.0)
        net.c_fc.bias.fill_(1.0)
    used = apply_init(net, scheme, hidden=h, n_layers=layers,
                      generator=torch.Generator().manual_seed(0))
    base = {"normal": 0.02, "megatron": 0.02, "small_init": math.sqrt(2 / (5 * h)),
            "530b": math.sqrt(1 / (3 * h))}[scheme]
    out = base if scheme == "normal" else base / math.sqrt(2 * layers)
    for name, expected in (("emb", base), ("c_fc", base), ("c_proj", out)):
        w = getattr(net, name).weight
        assert used[f"{name}.weight"] == pytest.approx(expected)
        n = w.numel()
        # the sample std of n normal draws has relative standard error ~ 1/sqrt(2n); allow 5 sigma
        tol = 5 / math.sqrt(2 * n)
        assert w.std().item() == pytest.approx(expected, rel=tol)
        assert abs(w.mean().item()) < 5 * expected / math.sqrt(n)
    assert torch.all(net.c_fc.bias == 0)
    assert torch.all(net.ln.weight == 1) and torch.all(net.ln.bias == 0)


def test_unknown_scheme_names_the_field():
    with pytest.raises(ConfigError, match="init"):
        apply_init(_Net(8), "xavier_magic", hidden=8, n_layers=1)
    with pytest.raises(ConfigError, match="hidden"):
        std_530b(0)
