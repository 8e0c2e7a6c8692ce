"""Skipping a step is exact and NaN-safe: weights, both moments and Adam's t keep their bits."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from lossguard.guard.gate import SkipStepAdamW, grad_norm, optimizer_state_finite, supports_device_gate  # noqa: E402
from lossguard.techniques.loss_scale import reset_grad_scaler  # noqa: E402


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def _backward(model, seed):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(32, 6, generator=g), torch.randn(32, 2, generator=g)
    torch.nn.functional.mse_loss(model(x), y).backward()


def _snapshot(model, opt):
    return copy.deepcopy([p.detach().clone() for p in model.parameters()]), copy.deepcopy(opt.state_dict())


def _assert_bitwise(a, b):
    (pa, sa), (pb, sb) = a, b
    for x, y in zip(pa, pb, strict=True):
        assert torch.equal(x, y)
    for k in sa["state"]:
        for name, v in sa["state"][k].items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(sb["state"][k][name])), name
    assert sa["param_groups"] == sb["param_groups"]


@pytest.mark.parametrize("kind", ["single", "foreach", "fused"])
@pytest.mark.parametrize("lr,wd,betas", [(3e-3, 0.1, (0.9, 0.999)), (1e-2, 0.0, (0.8, 0.95))])
def test_skipstepadamw_is_bitwise_torch_adamw_on_open_gates(kind, lr, wd, betas):
    """Open gate = torch's AdamW, bit for bit; a closed gate = not calling AdamW's step at all.
    ``fused``: the path CUDA takes by default (torch's fused kernel gated by its found_inf), run
    here on torch's CPU fused kernel against ``AdamW(fused=True)``."""
    m1, m2 = _model(), _model()
    fused = kind == "fused"
    o1 = SkipStepAdamW(m1.parameters(), lr=lr, weight_decay=wd, betas=betas, fused=fused)
    o2 = torch.optim.AdamW(m2.parameters(), lr=lr, weight_decay=wd, betas=betas, foreach=kind == "foreach",
                           fused=fused or None)
    withheld = {7, 8, 19}
    for s in range(40):
        for m, o in ((m1, o1), (m2, o2)):
            o.zero_grad()
            _backward(m, s)
        o1.step(gate=torch.tensor(s not in withheld))
        if s not in withheld:
            o2.step()
    for a, b in zip(m1.parameters(), m2.parameters(), strict=True):
        assert torch.equal(a, b)
        sa, sb = o1.state[a], o2.state[b]
        assert sa.keys() == sb.keys()
        assert all(torch.equal(sa[k], sb[k]) for k in sb)
    assert float(o1.state[next(iter(m1.parameters()))]["step"]) == 40 - len(withheld)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
def test_device_gate_skip_is_bitwise_even_with_nan_grads(poison, fused):
    model = _model()
    opt = SkipStepAdamW(model.parameters(), lr=1e-2, fused=fused)
    for s in range(3):
        opt.zero_grad()
        _backward(model, s)
        opt.step(gate=torch.tensor(True))
    before = _snapshot(model, opt)
    opt.zero_grad()
    _backward(model, 99)
    next(model.parameters()).grad.view(-1)[0] = poison
    opt.step(gate=torch.tensor(False))
    _assert_bitwise(before, _snapshot(model, opt))
    assert optimizer_state_finite(opt)


@pytest.mark.parametrize("fused", [False, True])
def test_device_gate_on_the_very_first_step_leaves_fresh_state(fused):
    # t = 0 makes the bias correction 1 - beta^0 = 0: the rejected branch divides by zero; the
    # select must still keep every weight.
    model = _model()
    opt = SkipStepAdamW(model.parameters(), lr=1e-2, fused=fused)
    before = [p.detach().clone() for p in model.parameters()]
    _backward(model, 0)
    opt.step(gate=torch.tensor(False))
    for p, b in zip(model.parameters(), before, strict=True):
        assert torch.equal(p, b)
    assert all(float(st["step"]) == 0 and not st["exp_avg"].any() for st in opt.state.values())


def test_fused_by_default_only_on_cuda():
    assert not SkipStepAdamW(_model().parameters()).defaults.get("fused")
    groups = [{"params": (p for p in _model().parameters()), "lr": 1e-3}]  # a generator, consumed once
    assert len(SkipStepAdamW(groups).param_groups[0]["params"]) == 4


def test_multiply_by_zero_gate_would_leak_nan():
    # Why we select: the OLMo-core style gate (update * 0) poisons the weights with a NaN gradient.
    w = torch.ones(3)
    update = torch.tensor([0.1, float("nan"), 0.2])
    assert torch.isnan(w - 0.0 * update).any()
    assert not torch.isnan(torch.where(torch.tensor(False), w - update, w)).any()


def test_supports_device_gate():
    assert supports_device_gate(SkipStepAdamW(_model().parameters()))
    assert not supports_device_gate(torch.optim.AdamW(_model().parameters()))


def test_grad_norm_measures_and_clips():
    model = _model()
    _backward(model, 1)
    ref = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
    n = grad_norm(list(model.parameters()), max_norm=ref.item() / 4)
    torch.testing.assert_close(n, ref)
    after = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
    torch.testing.assert_close(after, ref / 4, rtol=1e-4, atol=0)


def test_reset_grad_scaler_resets_scale_and_growth_tracker():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1000)
    for _ in range(5):  # grow the tracker with good steps
        opt.zero_grad()
        x = torch.randn(4, 6)
        scaler.scale(model(x).sum()).backward()
        scaler.step(opt)
        scaler.update()
    assert int(scaler._growth_tracker) == 5
    scaler.update(new_scale=2.0)
    assert int(scaler._growth_tracker) == 5  # update(new_scale=) alone leaves the tracker: the trap
    assert reset_grad_scaler(scaler) == 1024.0
    assert scaler.get_scale() == 1024.0 and int(scaler._growth_tracker) == 0


def test_optimizer_state_finite_detects_poisoned_moment():
    model = _model()
    opt = torch.optim.AdamW(model.parameters())
    _backward(model, 0)
    opt.step()
    assert optimizer_state_finite(opt)
    next(iter(opt.state.values()))["exp_avg_sq"].view(-1)[0] = float("nan")
    assert not optimizer_state_finite(opt)
