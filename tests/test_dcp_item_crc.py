"""Sharded loads verify each DCP storage item's bytes as DCP reads them (issue 23): damage anywhere
in a shard file (zip header, tensor bytes, padding, the zip directory at the end) is caught with
the file named, almost nothing is read twice, and a checkpoint written before item marks still
loads (verified by a whole-file pass)."""
from __future__ import annotations

import json
import warnings
import zlib

import pytest

torch = pytest.importorskip("torch")

from lossguard.checkpoint import ShardedCheckpointStore, ShardedTrainState  # noqa: E402
from lossguard.checkpoint import files  # noqa: E402
from lossguard.checkpoint.files import Checksum, Crc32c  # noqa: E402
from lossguard.errors import CheckpointError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _state(width=64):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, width)).sum().backward()
    opt.step()
    return ShardedTrainState(model, opt)


def _saved(tmp_path, width=64):
    state, store = _state(width), ShardedCheckpointStore(tmp_path, keep_last=5)
    for step in (1, 2):
        state.step = step
        state.save(store)
    return state, store


def _flip(path, at):
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))


def test_marks_cover_every_item_of_each_shard(tmp_path):
    _, store = _saved(tmp_path)
    files = json.loads((store.path_of(2) / "manifest.json").read_text())["files"]
    marks = files["__0_0.distcp"]["marks"]
    assert marks[0] == [0, 0] and marks[-1][0] == files["__0_0.distcp"]["size"]
    assert len(marks) > 8  # one per item boundary: 4 params x (weight, exp_avg, exp_avg_sq, ...)


@pytest.mark.parametrize("where", ["first byte", "early header", "middle", "zip directory", "last byte"])
def test_damage_anywhere_in_a_shard_is_caught_and_named(tmp_path, where):
    state, store = _saved(tmp_path)
    shard = store.path_of(2) / "__0_0.distcp"
    size = shard.stat().st_size
    at = {"first byte": 0, "early header": 40, "middle": size // 2, "zip directory": size - 30,
          "last byte": size - 1}[where]
    _flip(shard, at)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert state.restore(store) == 1  # passed over, the older one loads
    assert any("__0_0.distcp" in str(w.message) for w in caught)
    with pytest.raises(CheckpointError, match=r"__0_0\.distcp"):
        state.restore(store, 2)
    _flip(shard, at)
    assert state.restore(store, 2) == 2


def test_a_load_reads_almost_every_byte_once(tmp_path, preads):
    state, store = _saved(tmp_path, width=512)
    reread = preads
    assert state.restore(store, 2) == 2
    shards = sum(p.stat().st_size for p in store.path_of(2).glob("*.distcp"))
    # zip headers, padding and the small items (2 KiB biases) only; no 1 MiB weight is read twice
    assert reread and sum(reread) < 0.05 * shards and max(reread) < 1 << 16


def test_a_checkpoint_without_item_marks_loads_and_is_still_verified(tmp_path):
    """Checkpoints written before item marks (manifest entries with size and CRC only) are verified
    by the earlier whole-file pass."""
    state, store = _saved(tmp_path)
    for step in (1, 2):
        manifest = store.path_of(step) / "manifest.json"
        doc = json.loads(manifest.read_text())
        for entry in doc["files"].values():
            entry.pop("marks", None)
        manifest.write_text(json.dumps(doc))
    assert state.restore(store, 2) == 2
    _flip(store.path_of(2) / "__0_0.distcp", 100)
    with pytest.raises(CheckpointError, match=r"__0_0\.distcp"):
        state.restore(store, 2)


def test_zlib_crc32_marks_verify_too(tmp_path):
    """CRC-32 marks (zlib-ng's or the stdlib's: the same values) are checked the same way."""
    state, store = _state(), ShardedCheckpointStore(tmp_path, keep_last=5)
    store._algorithm = Checksum
    for step in (1, 2):
        state.step = step
        state.save(store)
    entry = json.loads((store.path_of(2) / "manifest.json").read_text())["files"]["__0_0.distcp"]
    assert "crc32" in entry and "marks" in entry
    assert state.restore(store, 2) == 2
    _flip(store.path_of(2) / "__0_0.distcp", entry["size"] // 3)
    with pytest.raises(CheckpointError, match=r"__0_0\.distcp does not match its CRC-32 "):
        state.restore(store, 2)


def test_crc32c_checkpoints_of_session_5_still_load_and_verify(tmp_path):
    """New checkpoints record CRC-32 when zlib-ng is installed; those written with CRC-32C (the
    previous default) keep loading, verified by google-crc32c, and damage is still named."""
    pytest.importorskip("google_crc32c")
    state, store = _state(), ShardedCheckpointStore(tmp_path, keep_last=5)
    store._algorithm = Crc32c
    for step in (1, 2):
        state.step = step
        state.save(store)
    entry = json.loads((store.path_of(2) / "manifest.json").read_text())["files"]["__0_0.distcp"]
    assert "crc32c" in entry and "crc32" not in entry and "marks" in entry
    assert state.restore(store, 2) == 2
    _flip(store.path_of(2) / "__0_0.distcp", entry["size"] // 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert state.restore(store) == 1  # passed over, the older one loads
    assert any("__0_0.distcp does not match its CRC-32C" in str(w.message) for w in caught)


def test_crc32_written_with_zlib_ng_verifies_with_the_stdlib(tmp_path, monkeypatch):
    """A checkpoint hashed by zlib-ng loads on a machine without it (stdlib zlib, same CRC-32)."""
    pytest.importorskip("zlib_ng")
    assert files.fast_checksum() is Checksum  # the fastest here: zlib-ng's CRC-32
    state, store = _saved(tmp_path)
    assert "crc32" in json.loads((store.path_of(2) / "manifest.json").read_text())["files"]["__0_0.distcp"]
    monkeypatch.setattr(files, "crc32_function", lambda: zlib.crc32)
    assert state.restore(store, 2) == 2
    _flip(store.path_of(2) / "__0_0.distcp", 100)
    with pytest.raises(CheckpointError, match=r"__0_0\.distcp"):
        state.restore(store, 2)
