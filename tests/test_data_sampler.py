"""Resumable data: no sample seen twice and none missing except the skipped ones, across resumes,
skips and epoch boundaries; O(1) skip; exact with 2 workers; torchdata StatefulDataLoader path."""
from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

from lossguard.data.sampler import ResumableSampler
from lossguard.errors import CheckpointError, ConfigError

N, BS = 96, 8  # 12 batches per epoch


def test_each_epoch_is_a_permutation_and_order_is_a_function_of_seed_and_epoch():
    s = ResumableSampler(N, batch_size=BS, seed=3)
    epochs = [[i for _ in range(12) for i in s.next_batch()] for _ in range(3)]
    for ids in epochs:
        assert sorted(ids) == list(range(N))
    assert epochs[0] != epochs[1]  # reshuffled
    again = ResumableSampler(N, batch_size=BS, seed=3)
    assert [again.next_batch() for _ in range(12)] == [epochs[0][k:k + BS] for k in range(0, N, BS)]
    assert ResumableSampler(N, batch_size=BS, seed=4).next_batch() != epochs[0][:BS]
    plain = ResumableSampler(10, batch_size=4, seed=0, shuffle=False, drop_last=False)
    assert list(plain) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_resumes_rollbacks_and_skips_account_for_every_sample():
    straight = ResumableSampler(N, batch_size=BS, seed=7)
    reference = [straight.next_batch() for _ in range(60)]  # 5 epochs

    rng = np.random.default_rng(0)
    s = ResumableSampler(N, batch_size=BS, seed=7)
    seen: list[int] = []  # global batch indices delivered on the live timeline
    skipped: set[int] = set()
    saves = [(s.state_dict(), 0, frozenset())]
    rollbacks = 0
    while s.position < 50:
        action = rng.integers(5)
        if action == 0:  # resume in a fresh object from a state dict (as after a crash)
            fresh = ResumableSampler(N, batch_size=BS, seed=7)
            fresh.load_state_dict(s.state_dict())
            s = fresh
        elif action == 1:
            n = int(rng.integers(1, 4))
            skipped.update(range(s.position, s.position + n))
            s.skip_batches(n)
        elif action == 2:
            saves.append((s.state_dict(), len(seen), frozenset(skipped)))
        elif action == 3 and len(saves) > 1:
            # rollback: restore an older checkpoint, then skip past everything the dead timeline
            # read plus a margin (the PaLM recipe); the dead deliveries leave the live timeline
            reached = s.position
            state, n_live, skipped_then = saves[int(rng.integers(len(saves)))]
            s.load_state_dict(state)
            del seen[n_live:]
            skipped = set(skipped_then)
            n = reached - s.position + int(rng.integers(0, 3))
            skipped.update(range(s.position, s.position + n))
            s.skip_batches(n)
            rollbacks += 1
        else:
            ids = s.next_batch()
            assert ids == reference[s.position - 1] == s.last_batch_ids()
            seen.append(s.position - 1)
    assert rollbacks >= 3
    assert len(seen) == len(set(seen))  # nothing delivered twice
    assert set(seen) | skipped == set(range(s.position)) and not set(seen) & skipped  # nothing lost
    assert sum(b - a for a, b in s.skipped) == len(skipped)  # the sampler's own record agrees
    # per epoch: the delivered samples are exactly the epoch minus the skipped batches' samples
    for epoch in range(4):
        got = Counter(i for b in seen if b // 12 == epoch for i in reference[b])
        assert not got or max(got.values()) == 1
        assert set(got) == set(range(N)) - {i for b in skipped if b // 12 == epoch for i in reference[b]}


def test_skip_is_constant_time():
    s = ResumableSampler(10**10, batch_size=1024, seed=0)  # a permutation of this would not fit in memory
    t0 = time.perf_counter()
    for _ in range(1000):
        s.skip_batches(10**6)
    per_skip = (time.perf_counter() - t0) / 1000
    assert s.position == 10**9 and s.epoch == 10**9 // s.batches_per_epoch
    assert per_skip < 1e-4 and s._cache is None  # never materialised an order


def test_bad_arguments_and_mismatched_state():
    with pytest.raises(ConfigError) as err:
        ResumableSampler(0, batch_size=0, seed=-1)
    assert all(k in str(err.value) for k in ("dataset_len", "batch_size", "seed"))
    saved = ResumableSampler(N, batch_size=BS, seed=1).state_dict()
    with pytest.raises(CheckpointError, match="seed: saved 1"):
        ResumableSampler(N, batch_size=BS, seed=2).load_state_dict(saved)


torch = pytest.importorskip("torch")


class _Indexed(torch.utils.data.Dataset):
    """Returns (index, value) so the batch carries its own provenance."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        return i, torch.tensor(float(i) * 2)


def _take(it, n):
    return [next(it)[0].tolist() for _ in range(n)]


def test_resumable_loader_two_workers_resume_and_skip():
    from lossguard.data.loader import ResumableLoader

    ref = ResumableSampler(N, batch_size=BS, seed=5)
    reference = [ref.batch_ids(p) for p in range(30)]

    s = ResumableSampler(N, batch_size=BS, seed=5)
    loader = ResumableLoader(_Indexed(), s, num_workers=2)
    it = loader.batches()
    got = _take(it, 5)  # workers have prefetched well past batch 5 by now
    assert s.position == 5 and loader.last_batch_ids() == got[-1]
    saved = s.state_dict()
    s.skip_batches(4)  # while the iterator holds prefetched batches
    got += _take(it, 3)
    assert got == reference[:5] + reference[9:12]
    # resume from the state saved at position 5, in a new sampler and loader
    s2 = ResumableSampler(N, batch_size=BS, seed=5)
    s2.load_state_dict(saved)
    it2 = ResumableLoader(_Indexed(), s2, num_workers=2).batches()
    assert _take(it2, 20) == reference[5:25]  # across the epoch boundary at 12 and 24
    del it, it2


def test_resumable_loader_epoch_iteration_and_plain_dataloader():
    from lossguard.data.loader import ResumableLoader

    s = ResumableSampler(N, batch_size=BS, seed=2)
    loader = ResumableLoader(_Indexed(), s, num_workers=0)
    first = [b[0].tolist() for b in loader]
    assert len(first) == 12 and s.position == 12
    assert sorted(i for b in first for i in b) == list(range(N))
    # a plain DataLoader with 0 workers commits when it takes the indices: exact too
    p = ResumableSampler(N, batch_size=BS, seed=2)
    dl = torch.utils.data.DataLoader(_Indexed(), batch_sampler=p)
    it = iter(dl)
    for k in range(3):
        assert next(it)[0].tolist() == first[k] and p.position == k + 1


class _Shards(torch.utils.data.IterableDataset):
    """A stream sharded across workers, with its own position as state (per worker)."""

    def __init__(self):
        self.pos = 0

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        for i in range(wid + self.pos * nw, 400, nw):
            self.pos += 1
            yield i

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, sd):
        self.pos = sd["pos"]


@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_stateful_dataloader_resumes_mid_epoch_with_two_workers(kind):
    from lossguard.data.stateful import stateful_loader

    def make():
        ds = _Indexed() if kind == "map" else _Shards()
        return stateful_loader(ds, batch_size=BS, seed=11, num_workers=2)

    def ids(batch):
        return (batch[0] if kind == "map" else batch).tolist()

    straight = make()
    ref = []
    epochs = 2 if kind == "map" else 1  # the second epoch's shuffle must match after a resume too
    for _ in range(epochs):
        ref += [ids(b) for b in straight]
    loader = make()
    it = iter(loader)
    got = [ids(next(it)) for _ in range(5)]
    saved = loader.state_dict()
    del it
    resumed = make()
    resumed.load_state_dict(saved)
    for _ in range(epochs):
        got += [ids(b) for b in resumed]
    assert got == ref[:len(got)] and len(got) == len(ref)
    assert len(set(i for b in got for i in b)) == (N if kind == "map" else 400)


def _two_epochs_with_resume(make):
    """(straight, resumed) sample order over two epochs; the resume happens after batch 5 of 12."""
    straight = make()
    ref = [b.tolist() for _ in range(2) for b in straight]
    loader = make()
    it = iter(loader)
    got = [next(it).tolist() for _ in range(5)]
    saved = loader.state_dict()
    del it
    resumed = make()
    resumed.load_state_dict(saved)
    got += [b.tolist() for _ in range(2) for b in resumed]
    return ref, got


def test_stateful_loader_avoids_the_shared_generator_trap_with_zero_workers():
    from torchdata.stateful_dataloader import StatefulDataLoader

    from lossguard.data.stateful import stateful_loader

    data = list(range(N))
    # negative control: one generator for sampler and loader, num_workers=0 -> epoch 2 differs
    ref, got = _two_epochs_with_resume(lambda: StatefulDataLoader(
        data, batch_size=BS, shuffle=True, generator=torch.Generator().manual_seed(0), num_workers=0))
    assert got[:12] == ref[:12] and got[12:] != ref[12:]
    ref, got = _two_epochs_with_resume(lambda: stateful_loader(data, batch_size=BS, seed=0, num_workers=0))
    assert got == ref and len(got) == 24


def test_creating_an_iterator_does_not_draw_from_the_global_rng():
    from lossguard.data.loader import ResumableLoader

    plain = torch.utils.data.DataLoader(_Indexed(), batch_size=BS)
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    iter(plain)  # negative control: a stock DataLoader draws its base seed from the global RNG
    assert not torch.equal(torch.rand(1), expected)
    torch.manual_seed(0)
    next(ResumableLoader(_Indexed(), ResumableSampler(N, batch_size=BS, seed=0)).batches())
    assert torch.equal(torch.rand(1), expected)


def test_ranks_share_one_position_and_split_each_global_batch():
    ranks = [ResumableSampler(N, batch_size=4, seed=9, num_replicas=3, rank=r) for r in range(3)]
    assert ranks[0].batches_per_epoch == N // 12
    seen = []
    for _ in range(ranks[0].batches_per_epoch):
        batches = [s.next_batch() for s in ranks]
        assert sum(batches, []) == ranks[0].global_batch_ids(ranks[0].position - 1)
        seen += sum(batches, [])
    assert sorted(seen) == list(range(N))  # one epoch: every sample once, across all ranks
    saved = ranks[0].state_dict()  # rank 0 saves; every rank resumes from it
    other = ResumableSampler(N, batch_size=4, seed=9, num_replicas=3, rank=2)
    other.load_state_dict(saved)
    assert other.position == ranks[2].position and other.next_batch() == ranks[2].next_batch()
    with pytest.raises(CheckpointError, match="num_replicas"):
        ResumableSampler(N, batch_size=4, seed=9).load_state_dict(saved)
    with pytest.raises(ConfigError, match="rank"):
        ResumableSampler(N, batch_size=4, seed=9, num_replicas=2, rank=2)
