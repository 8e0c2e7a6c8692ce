"""Sharded checkpoints are checksummed while DCP writes them and verified while DCP reads them
(issue 23): the manifest's checksums are those of the bytes on disk, a plain CheckpointStore
validates them, and a damaged .metadata or rank state (one DCP item of the rank's shard file) is
caught on load."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from lossguard.checkpoint import CheckpointStore, ShardedCheckpointStore, ShardedTrainState  # noqa: E402
from lossguard.checkpoint.files import entry_matches, fast_checksum  # noqa: E402
from lossguard.errors import CheckpointError  # noqa: E402


def _state():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 32)).sum().backward()
    opt.step()
    return ShardedTrainState(model, opt)


def _flip(path, at=None):
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2 if at is None else at] ^= 0xFF
    path.write_bytes(bytes(raw))


def _rank_item(path):
    """(file, middle byte) of rank 0's own-state item, from DCP's .metadata."""
    from torch.distributed.checkpoint import FileSystemReader

    info = next(v for k, v in FileSystemReader(path).read_metadata().storage_data.items()
                if k.fqn == "lossguard_rank_00000")
    return info.relative_path, info.offset + info.length // 2


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_checksums_hashed_while_writing_are_the_files_own(tmp_path):
    import json

    state, store = _state(), ShardedCheckpointStore(tmp_path, keep_last=5)
    for step in (1, 2):
        state.step = step
        state.save(store)
    files = json.loads((store.path_of(2) / "manifest.json").read_text())["files"]
    assert set(files) == {"__0_0.distcp", ".metadata"}  # the rank's own state is an item of its shard file
    assert all(fast_checksum().NAME in e for e in files.values())  # CRC-32 with zlib-ng, else CRC-32C
    assert all(entry_matches(store.path_of(2) / n, e) for n, e in files.items())
    assert all(i.valid for i in CheckpointStore(tmp_path).validate())
    name, middle = _rank_item(store.path_of(2))
    for damaged, at in ((".metadata", None), (name, middle)):
        _flip(store.path_of(2) / damaged, at)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert state.restore(store) == 1  # passed over, the older one loads
        assert any(damaged in str(w.message) for w in caught)
        with pytest.raises(CheckpointError, match=damaged.replace(".", r"\.")):
            state.restore(store, 2)
        _flip(store.path_of(2) / damaged, at)  # repaired: loads again
        assert state.restore(store, 2) == 2
