"""Rank 0 publishes a sharded checkpoint inside DCP's own finish step (issue 23): what is fsynced and
when, a re-save of the same step, and a publication that fails."""
from __future__ import annotations

import errno
import os

import pytest

torch = pytest.importorskip("torch")

from lossguard.checkpoint import ShardedCheckpointStore, ShardedTrainState  # noqa: E402
from lossguard.errors import CheckpointError  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _state(seed: int = 0) -> ShardedTrainState:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 16)).sum().backward()
    opt.step()
    return ShardedTrainState(model, opt)


def test_every_file_and_the_rename_are_fsynced_before_the_save_returns(tmp_path, monkeypatch):
    state, store = _state(), ShardedCheckpointStore(tmp_path, keep_last=5)
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    state.step = 3
    final = state.save(store)
    monkeypatch.undo()
    shard = [p for p in synced if p.endswith("__0_0.distcp")]
    assert len(shard) == 1 and ".tmp-step-00000003" in shard[0]  # by DCP, while writing
    # after the rename, under the final name: .metadata, the manifest and the parent directory
    assert {str(final / ".metadata"), str(final / "manifest.json"), str(tmp_path)} <= set(synced)
    assert len(synced) == 4  # nothing else: no rank file, no temp-directory fsync
    assert state.restore(store, 3) == 3


def test_a_resave_of_the_same_step_replaces_it(tmp_path):
    state, store = _state(), ShardedCheckpointStore(tmp_path, keep_last=5)
    state.step = 4
    state.save(store)
    first = [p.detach().clone() for p in state.model.parameters()]
    with torch.no_grad():
        for p in state.model.parameters():
            p.add_(1.0)
    second = [p.detach().clone() for p in state.model.parameters()]
    state.save(store)  # the same step again (a run that rolled back and came past it)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000004"]  # no .old or .tmp left
    with torch.no_grad():
        for p, f in zip(state.model.parameters(), first, strict=True):
            p.copy_(f)
    assert state.restore(store, 4) == 4
    assert all(torch.equal(p, s) for p, s in zip(state.model.parameters(), second, strict=True))


def test_a_failed_publication_fails_the_save_and_leaves_the_older_ones(tmp_path, monkeypatch):
    state, store = _state(), ShardedCheckpointStore(tmp_path, keep_last=5)
    for step in (1, 2):
        state.step = step
        state.save(store)
    real_rename = os.rename

    def failing_rename(src, dst, *args, **kwargs):
        if os.path.basename(str(src)).startswith(".tmp-step-00000003"):
            raise OSError(errno.EIO, "simulated I/O error")
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", failing_rename)
    state.step = 3
    with pytest.raises(CheckpointError, match=r"sharded save of step 3 failed: OSError: .*simulated I/O error"):
        state.save(store)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000001", "step-00000002"]  # temp dir removed
    assert state.restore(store) == 2
