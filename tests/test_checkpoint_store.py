"""CheckpointStore: atomic writes, retention (keep-last-k, keep-every, protected, rollback horizon),
validation of damaged checkpoints, and RNG capture/restore."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from lossguard.checkpoint.rng import capture_rng, restore_rng  # noqa: E402
from lossguard.checkpoint.state import TrainState  # noqa: E402
from lossguard.checkpoint.store import CheckpointStore  # noqa: E402
from lossguard.errors import CheckpointError, ConfigError  # noqa: E402


def _state(step: int) -> dict:
    return {"step": step, "w": torch.full((64,), float(step)), "meta": {"name": f"s{step}"}}


def test_save_load_roundtrip_and_listing(tmp_path):
    store = CheckpointStore(tmp_path, keep_last=10)
    path = store.save(5, _state(5))
    store.save(12, _state(12))
    assert path == tmp_path / "step-00000005"
    assert store.steps() == [5, 12]
    assert store.load()["step"] == 12
    loaded = store.load(5)
    assert torch.equal(loaded["w"], torch.full((64,), 5.0)) and loaded["meta"] == {"name": "s5"}
    infos = store.validate()
    assert [(i.step, i.valid) for i in infos] == [(5, True), (12, True)]
    assert all(i.size > 0 for i in infos)
    assert store.newest_at_or_before(11) == 5 and store.newest_at_or_before(12) == 12
    assert store.newest_at_or_before(4) is None
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp leftovers


def test_overwrite_same_step_replaces_atomically(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(7, _state(7))
    store.save(7, {"step": 7, "w": torch.zeros(3)})
    assert torch.equal(store.load(7)["w"], torch.zeros(3))
    assert [p.name for p in tmp_path.iterdir()] == ["step-00000007"]


def test_keep_last_keep_every_and_protected(tmp_path):
    store = CheckpointStore(tmp_path, keep_last=2, keep_every=50)
    store.protect(20)
    for step in range(10, 130, 10):
        store.save(step, _state(step))
    # last two (110, 120), multiples of 50 (50, 100), protected 20.
    assert store.steps() == [20, 50, 100, 110, 120]
    store.unprotect(20)
    store.save(130, _state(130))
    assert store.steps() == [50, 100, 120, 130]


def test_rollback_horizon_keeps_target(tmp_path):
    store = CheckpointStore(tmp_path, keep_last=1, min_keep_steps_back=100)
    for step in range(0, 501, 40):  # 0, 40, ..., 480
        store.save(step, _state(step))
    # newest 480: keep everything newer than 380 (400, 440, 480) and the newest <= 380 (360).
    assert store.steps() == [360, 400, 440, 480]
    # a spike just after the newest checkpoint (onset 481) finds its target >= 100 steps back
    assert store.newest_at_or_before(481 - 100) == 360


def test_damaged_checkpoints_are_reported_and_skipped(tmp_path):
    store = CheckpointStore(tmp_path, keep_last=5)
    for step in (1, 2, 3):
        store.save(step, _state(step))
    # flip one byte in the newest payload: same size, wrong checksum
    payload = tmp_path / "step-00000003" / "state.pt"
    data = bytearray(payload.read_bytes())
    data[len(data) // 2] ^= 0xFF
    payload.write_bytes(bytes(data))
    # truncate the middle one
    (tmp_path / "step-00000002" / "state.pt").write_bytes(b"PK")
    with pytest.raises(CheckpointError) as err:
        store.load(3)
    assert "step-00000003" in str(err.value) and "CRC-32" in str(err.value) and "fix:" in str(err.value)
    with pytest.raises(CheckpointError, match="manifest recorded"):
        store.load(2)
    with pytest.warns(UserWarning, match="step-00000003.*CRC-32"):
        assert store.load()["step"] == 1  # newest that verifies, saying what it passed over
    report = {i.step: (i.valid, i.reason) for i in store.validate()}
    assert report[1] == (True, "") and not report[2][0] and "CRC-32" in report[3][1]
    with pytest.raises(CheckpointError, match="no checkpoint of step 9"):
        store.load(9)


def test_missing_manifest_means_invalid(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(4, _state(4))
    (tmp_path / "step-00000004" / "manifest.json").unlink()
    assert store.steps() == []
    with pytest.raises(CheckpointError, match="no valid checkpoint"):
        store.load()


def test_bad_arguments_are_config_errors(tmp_path):
    with pytest.raises(ConfigError) as err:
        CheckpointStore(tmp_path, keep_last=0, keep_every=-1)
    assert "keep_last" in str(err.value) and "keep_every" in str(err.value)
    with pytest.raises(CheckpointError, match="step must be"):
        CheckpointStore(tmp_path).save(-1, {})


_WRITER = textwrap.dedent("""
    import os, sys, time, torch
    from lossguard.checkpoint.store import CheckpointStore

    class Slow(CheckpointStore):
        def _write_payload(self, path, state):
            with open(path, "wb") as fh:
                fh.write(b"x" * 1000)
                fh.flush()
                print("WRITING", flush=True)
                time.sleep(60)  # killed here

    store = Slow(sys.argv[1])
    store.save(int(sys.argv[2]), {"w": torch.ones(3)})
""")


def test_kill_during_write_keeps_previous_valid(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(10, _state(10))
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), "20"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "WRITING"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-step-00000020")]
    assert partial, "the kill should have left a partial temp checkpoint behind"
    fresh = CheckpointStore(tmp_path)  # a new process's view: the partial one is ignored and cleaned
    assert fresh.steps() == [10] and fresh.load()["step"] == 10
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_killed_between_renames_of_overwrite_restores_original(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(10, _state(10))
    # simulate a writer (dead pid) that moved the original aside and died before the second rename
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    os.rename(tmp_path / "step-00000010", tmp_path / f".old-step-00000010-{dead.pid}-1")
    fresh = CheckpointStore(tmp_path)
    assert fresh.steps() == [10] and fresh.load()["step"] == 10


def test_rng_roundtrip_through_store(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    np.random.standard_normal()  # leaves a cached gaussian in numpy's legacy state
    snap = capture_rng()
    expected = (random.random(), np.random.standard_normal(3).tolist(), torch.rand(3))
    store = CheckpointStore(tmp_path)
    store.save(1, {"rng": snap})
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    restore_rng(store.load(weights_only=True)["rng"])  # plain containers: loads with weights_only
    got = (random.random(), np.random.standard_normal(3).tolist(), torch.rand(3))
    assert got[0] == expected[0] and got[1] == expected[1] and torch.equal(got[2], expected[2])
    with pytest.raises(CheckpointError, match="not an RNG snapshot"):
        restore_rng({"x": 1})


def test_trainstate_mismatch_is_a_clear_error(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, 5)
    sd = TrainState(model, opt, scheduler=sched, step=4).state_dict()
    other = torch.nn.Linear(4, 2)
    with pytest.raises(CheckpointError, match="scheduler"):
        TrainState(other, torch.optim.AdamW(other.parameters())).load_state_dict(sd)
    with pytest.raises(CheckpointError, match="model.load_state_dict failed"):
        TrainState(other, torch.optim.AdamW(other.parameters())).load_state_dict(sd, strict=False)
    with pytest.raises(CheckpointError, match="not a lossguard TrainState"):
        TrainState(model, opt).load_state_dict({"w": 1})
    with pytest.raises(CheckpointError, match="no state_dict"):
        TrainState(model, opt, extras={"guard": object()})
    restored = TrainState(model, opt, scheduler=sched)
    restored.load_state_dict(sd)
    assert restored.step == 4


class _Window:
    """A stateful extra whose state holds a non-tensor object (like a guard's detector window)."""

    def __init__(self):
        from collections import deque

        self.values = deque([1.5, 2.5], maxlen=4)

    def state_dict(self):
        return {"values": self.values}

    def load_state_dict(self, sd):
        self.values = sd["values"]


def test_extras_roundtrip_and_weights_only_fallback(tmp_path):
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    window = _Window()
    store = CheckpointStore(tmp_path)
    TrainState(model, opt, extras={"guard": window}, step=3).save(store)
    window.values.append(9.0)
    with pytest.raises(CheckpointError, match="weights_only=True refuses"):
        store.load(3, weights_only=True)  # a deque is not on torch's weights_only allow-list
    state = TrainState(model, opt, extras={"guard": window})
    assert state.restore(store) == 3  # default: weights_only first, then the full unpickler
    assert list(window.values) == [1.5, 2.5]
