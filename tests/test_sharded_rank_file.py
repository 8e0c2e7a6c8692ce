"""A sharded checkpoint of an older lossguard keeps each rank's own state in ``rank-NNNNN.pt``
beside the shards (newer ones hold it as a DCP item of the rank's shard file, issue 23): such a
checkpoint still loads, its rank file is the state used, and damage to it is caught."""
from __future__ import annotations

import io
import json
import warnings

import pytest

torch = pytest.importorskip("torch")

from lossguard.checkpoint import ShardedCheckpointStore, ShardedTrainState  # noqa: E402
from lossguard.checkpoint.files import Checksum  # noqa: E402
from lossguard.errors import CheckpointError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _as_older_layout(path, step_in_file: int) -> None:
    """Give the checkpoint at ``path`` a rank file, listed in its manifest, whose state says
    ``step_in_file`` (the item in the shard still says the saved step: which one loads shows)."""
    state = ShardedTrainState(torch.nn.Linear(1, 1), torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1))
    own = state.rank_state_dict()
    own["step"] = step_in_file
    buf = io.BytesIO()
    torch.save(own, buf)
    raw = buf.getvalue()
    (path / "rank-00000.pt").write_bytes(raw)
    crc = Checksum()
    crc.update(raw)
    doc = json.loads((path / "manifest.json").read_text())
    doc["files"]["rank-00000.pt"] = {"size": len(raw), crc.NAME: crc.hexdigest()}
    (path / "manifest.json").write_text(json.dumps(doc))


def test_a_checkpoint_with_rank_files_loads_its_rank_file(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 16)).sum().backward()
    opt.step()
    state, store = ShardedTrainState(model, opt), ShardedCheckpointStore(tmp_path, keep_last=10)
    for step in (1, 2):
        state.step = step
        state.save(store)
    _as_older_layout(store.path_of(2), step_in_file=77)
    assert state.restore(store, 2) == 77  # the rank file's state, verified
    assert state.restore(store, 2, verify=False) == 77
    assert state.restore(store) == 77
    rank_file = store.path_of(2) / "rank-00000.pt"
    raw = bytearray(rank_file.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    rank_file.write_bytes(bytes(raw))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert state.restore(store) == 1  # the damaged one passed over
    assert any("rank-00000.pt" in str(w.message) for w in caught)
    with pytest.raises(CheckpointError, match=r"rank-00000\.pt"):
        state.restore(store, 2)
