"""Full GradScaler reset and the scale floor, on a real torch.amp.GradScaler on the CPU."""
import pytest

torch = pytest.importorskip("torch")

from lossguard.errors import ConfigError  # noqa: E402
from lossguard.techniques.loss_scale import LossScaleFloor, reset_grad_scaler  # noqa: E402


def _setup(init_scale=2.0 ** 16, growth_interval=4):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    return model, opt, scaler


def _step(model, opt, scaler, overflow: bool):
    x = torch.randn(8, 4)
    if overflow:
        x[0, 0] = float("inf")  # forced overflow: inf in the forward pass -> inf gradients
    opt.zero_grad()
    scaler.scale(model(x).square().mean()).backward()
    scaler.step(opt)  # skipped when the unscaled grads are not finite
    scaler.update()


def test_overflow_backs_off_and_update_new_scale_keeps_growth_tracker():
    model, opt, scaler = _setup()
    before = model.weight.detach().clone()
    for _ in range(3):
        _step(model, opt, scaler, overflow=True)
    assert scaler.get_scale() == 2.0 ** 13  # halved three times
    assert torch.equal(model.weight.detach(), before)  # no update applied
    for _ in range(3):
        _step(model, opt, scaler, overflow=False)
    assert scaler.state_dict()["_growth_tracker"] == 3
    # torch's own "reset": sets the scale, leaves the tracker
    scaler.update(new_scale=2.0 ** 16)
    assert scaler.get_scale() == 2.0 ** 16 and scaler.state_dict()["_growth_tracker"] == 3


def test_full_reset_behaves_like_a_fresh_scaler():
    model, opt, scaler = _setup()
    for overflow in (True, True, False, False, False):
        _step(model, opt, scaler, overflow)
    reset_grad_scaler(scaler, 2.0 ** 10)
    state = scaler.state_dict()
    assert state["scale"] == 2.0 ** 10 and state["_growth_tracker"] == 0
    fresh_model, fresh_opt, fresh = _setup(init_scale=2.0 ** 10)
    fresh_model.load_state_dict(model.state_dict())
    # from here both scalers must evolve identically: growth after exactly 4 clean steps
    for overflow in (False, False, False, False, False, True, False):
        _step(model, opt, scaler, overflow)
        _step(fresh_model, fresh_opt, fresh, overflow)
        assert scaler.state_dict() == fresh.state_dict()
    assert scaler.get_scale() == 2.0 ** 10  # grew to 2**11 after 4 steps, then halved once


def test_floor_stops_the_silent_slide_and_counts_it():
    model, opt, scaler = _setup(init_scale=4.0)
    floor = LossScaleFloor(min_scale=1.0)
    scales = []
    for _ in range(6):
        _step(model, opt, scaler, overflow=True)
        floor.apply(scaler)
        scales.append(scaler.get_scale())
    # 4 -> 2 -> 1 -> (0.5 clamped to 1) x4
    assert scales == [2.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert floor.hits == 4
    # without the floor the same sequence slides to 4 * 2**-6
    model, opt, scaler = _setup(init_scale=4.0)
    for _ in range(6):
        _step(model, opt, scaler, overflow=True)
    assert scaler.get_scale() == 4.0 * 2.0 ** -6


def test_floor_with_reset_to_restarts_the_scaler():
    model, opt, scaler = _setup(init_scale=2.0)
    floor = LossScaleFloor(min_scale=1.0, reset_to=2.0 ** 8)
    _step(model, opt, scaler, overflow=True)
    assert not bool(floor.apply(scaler)) and scaler.get_scale() == 1.0
    _step(model, opt, scaler, overflow=True)
    assert bool(floor.apply(scaler))
    assert scaler.state_dict()["scale"] == 2.0 ** 8 and scaler.state_dict()["_growth_tracker"] == 0


def test_validation_names_fields():
    with pytest.raises(ConfigError, match="min_scale"):
        LossScaleFloor(min_scale=0)
    with pytest.raises(ConfigError, match="reset_to"):
        LossScaleFloor(min_scale=4.0, reset_to=2.0)
    with pytest.raises(ConfigError, match="scale"):
        reset_grad_scaler(torch.amp.GradScaler("cpu"), -1.0)
