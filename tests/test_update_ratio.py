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
