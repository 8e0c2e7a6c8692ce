"""UpdateRatio: ||theta_new - theta_old|| / ||theta_old|| from one flat copy per device and dtype."""
import math

import pytest

torch = pytest.importorskip("torch")

from lossguard.guard.update_ratio import UpdateRatio  # noqa: E402


def _exact(old, new):
    num = sum(float((n.double() - o.double()).square().sum()) for o, n in zip(old, new, strict=True))
    den = sum(float(o.double().square().sum()) for o in old)
    return math.sqrt(num / den)


def test_ratio_matches_its_definition_over_mixed_dtypes_and_steps():
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(5, 3, generator=g), torch.randn(7, generator=g),
              torch.randn(4, 4, generator=g).to(torch.float64)]
    ur = UpdateRatio(params)
    assert ur.after() is None  # nothing kept yet
    for scale in (1e-3, 3e-2):
        old = [p.clone() for p in params]
        ur.before(refresh=True)
        with torch.no_grad():
            for p in params:
                p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
        r = ur.after()
        assert r is not None and r.dtype == torch.float32 and r.dim() == 0
        assert float(r) == pytest.approx(_exact(old, params), rel=1e-5)


def test_denominator_held_between_refreshes_and_rebuilt_after_storage_swap():
    p = torch.ones(10)
    ur = UpdateRatio([p])
    ur.before(refresh=True)  # ||theta||^2 = 10
    p.add_(0.1)
    assert float(ur.after()) == pytest.approx(math.sqrt(10 * 0.01 / 10))
    p.mul_(2)  # the weights' norm changes ...
    ur.before(refresh=False)  # ... but the held denominator is still the old one
    p.add_(0.1)
    assert float(ur.after()) == pytest.approx(math.sqrt(10 * 0.01 / 10))
    p.data = torch.full((10,), 3.0)  # a new storage: the copy follows it on the next refresh
    ur.before(refresh=True)
    p.add_(0.3)
    assert float(ur.after()) == pytest.approx(0.1)


def test_sampled_rows_count_k_times_and_track_the_exact_ratio_on_a_tiny_gpt():
    """A real model whose large matrices are row-sampled: the estimate is the rows' definition
    exactly, within a few percent of the exact ratio, and a 10x LR step shows as ~10x in both."""
    from lossguard.demo.model import GPTConfig, TinyGPT
    from lossguard.guard.update_ratio import SAMPLE_MIN_NUMEL
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(n_layer=2, n_head=2, n_embd=64, block_size=16))
    params = list(model.parameters())
    sampled_ps = [p for p in params if p.dim() >= 2 and p.numel() >= SAMPLE_MIN_NUMEL and p.shape[0] % 8 == 0]
    assert sampled_ps and len(sampled_ps) < len(params)  # both parts present
    opt = torch.optim.AdamW(params, lr=1e-3)
    exact, est = UpdateRatio(params, sample_every=1), UpdateRatio(params)
    x = torch.randint(0, 256, (4, 16), generator=torch.Generator().manual_seed(0))
    ratios = []
    for step in range(40):
        _, loss = model(x, x)
        loss.backward()
        exact.before(refresh=True)
        est.before(refresh=True)
        old = [p.detach().clone() for p in params]
        opt.param_groups[0]["lr"] = 1e-2 if step == 39 else 1e-3
        opt.step()
        opt.zero_grad()
        r_exact, r_est = float(exact.after()), float(est.after())
        # the estimator's own definition: sampled tensors' rows 0, 8, ... counted 8 times
        num = den = 0.0
        for o, p in zip(old, params, strict=True):
            w, (o2, p2) = (8.0, (o[::8], p.detach()[::8])) if any(p is s for s in sampled_ps) else (1.0, (o, p.detach()))
            num += w * float((p2.double() - o2.double()).square().sum())
            den += w * float(o2.double().square().sum())
        assert r_est == pytest.approx(math.sqrt(num / den), rel=1e-4)
        assert r_exact == pytest.approx(_exact(old, params), rel=1e-4)
        assert r_est == pytest.approx(r_exact, rel=0.1)
        ratios.append((r_exact, r_est))
    for i in (0, 1):
        jump = ratios[-1][i] / sorted(r[i] for r in ratios[-33:-1])[16]
        assert 6 < jump < 14  # the 10x LR step, seen by both


def test_sample_every_must_be_positive():
    with pytest.raises(ValueError):
        UpdateRatio([torch.ones(3)], sample_every=0)


def test_ratio_written_into_a_slot_and_a_rebuild_copies_nothing_from_the_host(monkeypatch):
    """after(out=) fills the caller's slot (the monitor's packed buffer) with the same value; the
    parts' weights are made on the device: on CUDA ``torch.tensor(list, device=...)`` is a blocking
    host-to-device copy (benchmarks/precursor_gpu.py found it at the first step), so it must not run."""
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(16, 1024, generator=g), torch.randn(5, generator=g)]  # one sampled, one whole
    ur, ref = UpdateRatio(params), UpdateRatio(params)

    def no_host_tensor(*a, **k):
        raise AssertionError("torch.tensor called in the per-step path or a rebuild")

    buf = torch.full((3,), math.nan)
    for step in range(3):
        if step == 2:
            params[1].data = params[1].data.clone()  # a new storage: the next refresh rebuilds
        ref.before(refresh=True)
        monkeypatch.setattr(torch, "tensor", no_host_tensor)
        ur.before(refresh=True)
        with torch.no_grad():
            for p in params:
                p.add_(1e-2 * torch.randn(p.shape, generator=g))
        slot = ur.after(out=buf[1])
        monkeypatch.undo()
        assert slot is not None and slot.data_ptr() == buf[1].data_ptr()
        assert math.isnan(buf[0]) and math.isnan(buf[2])
        assert float(buf[1]) == pytest.approx(float(ref.after()), rel=1e-6)
    assert ur._weights.tolist() == [1.0, 8.0]  # whole part once, sampled rows 8 times
