"""Rank 0's housekeeping at the start of a sharded save never removes the temp directory another
rank already made for that same save.

Every rank names the temp directory ``.tmp-step-<step>-<rank 0's pid>-<n>``; rank 0's ``_recover``
takes a side directory carrying its own pid for a leftover of its own. A rank that reached the save
first (found by ``benchmarks/checkpoint_dcp.py``: ``FileExistsError`` from DCP's ``mkdir`` on rank
1 while rank 0 deleted the directory) lost its directory mid-save. Here rank 0 is held until rank
1's directory exists, then saves: the directory must survive rank 0's housekeeping and the
checkpoint must publish and load.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from lossguard.testing.distributed import run_distributed  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.slow]  # 2 spawned ranks: 30 s on the loaded 2-core box


def _worker(rank: int, world: int, root: str):
    from lossguard.checkpoint import ShardedCheckpointStore

    store = ShardedCheckpointStore(Path(root), keep_last=2)
    survived: list[bool] = []
    if rank == 0:
        real = store._recover

        def held_recover():
            if survived:  # only the call at the start of the save is held (not the one after publishing)
                return real()
            deadline = time.monotonic() + 30
            while not any(p.name.startswith(".tmp-step-00000007") for p in Path(root).iterdir()):
                assert time.monotonic() < deadline, "rank 1 never made its temp dir"
                time.sleep(0.01)
            real()
            survived.append(any(p.name.startswith(".tmp-step-00000007") for p in Path(root).iterdir()))

        store._recover = held_recover  # type: ignore[method-assign]
    state = {"sharded": {"w": torch.full((4,), float(rank))}, "rank": {"rank": rank}}
    store.save(7, state)
    if rank == 0:
        store._recover = real  # type: ignore[method-assign]
    template = {"sharded": {"w": torch.zeros(4)}, "rank": None}
    loaded = store.load(7, template=template)
    return {"survived": survived[:1], "steps": store.agreed_steps(), "rank_state": loaded["rank"]}


def test_rank0_housekeeping_keeps_the_temp_dir_of_the_save_in_progress(tmp_path):
    out = run_distributed(_worker, world_size=2, args=(str(tmp_path / "ck"),), timeout=120)
    assert out[0]["survived"] == [True]
    assert out[0]["steps"] == out[1]["steps"] == [7]
    assert [o["rank_state"] for o in out] == [{"rank": 0}, {"rank": 1}]
