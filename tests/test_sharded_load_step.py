"""Loading an explicit step of a sharded store (a rollback's target) checks that checkpoint alone:
no listing of the directory on the way, and the same refusals as the listing gave (issue 23)."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from lossguard.checkpoint import ShardedCheckpointStore, ShardedTrainState  # noqa: E402
from lossguard.errors import CheckpointError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _saved(tmp_path, steps=(1, 2, 3)):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 16)).sum().backward()
    opt.step()
    state, store = ShardedTrainState(model, opt), ShardedCheckpointStore(tmp_path, keep_last=10)
    for step in steps:
        state.step = step
        state.save(store)
    return state, store


def test_an_explicit_step_loads_without_listing_the_directory(tmp_path, monkeypatch):
    state, store = _saved(tmp_path)

    def no_listing():
        raise AssertionError("listed every checkpoint to load one step")

    monkeypatch.setattr(store, "steps", no_listing)
    assert state.restore(store, 2) == 2
    with pytest.raises(AssertionError, match="listed"):
        state.restore(store)  # the newest: that one needs the listing


def test_a_missing_step_is_refused_with_the_valid_ones(tmp_path):
    state, store = _saved(tmp_path)
    with pytest.raises(CheckpointError, match=r"step 7 is not loadable \(it does not exist; valid: \[1, 2, 3\]\)"):
        state.restore(store, 7)


def test_a_manifest_of_another_step_is_refused(tmp_path):
    state, store = _saved(tmp_path)
    manifest = store.path_of(2) / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["step"] = 1
    manifest.write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match=r"step 2 is not loadable \(manifest says step 1, directory says 2"):
        state.restore(store, 2)
    assert state.restore(store) == 3


def test_a_truncated_file_of_an_explicit_step_is_named(tmp_path):
    state, store = _saved(tmp_path)
    shard = store.path_of(3) / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:-5])
    with pytest.raises(CheckpointError, match=r"__0_0\.distcp has \d+ bytes, the manifest recorded"):
        state.restore(store, 3)
    assert state.restore(store, 2) == 2
