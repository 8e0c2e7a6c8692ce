"""Sample ids per step (any world size, a named mix) and the portable skip list: listed samples never
reach a rank, whatever the batch size, world size, resume or prefetching loader."""
from __future__ import annotations

import json

import pytest

from lossguard.data.sample_ids import DatasetMix, SampleKey, step_samples
from lossguard.data.sampler import ResumableSampler
from lossguard.data.skiplist import SkipList
from lossguard.errors import ConfigError, LossguardError

N = 1000


def test_step_samples_are_each_ranks_slice_for_any_world_size():
    one = ResumableSampler(N, batch_size=16, seed=5)
    ranks = [ResumableSampler(N, batch_size=8, seed=5, num_replicas=2, rank=r) for r in range(2)]
    for p in (0, 7, 61, 62, 200):  # 62 batches per epoch: 62 and 200 are later epochs
        got = step_samples(ranks[0], p)
        assert [list(x) for x in got.per_rank] == [ranks[r].batch_ids(p) for r in range(2)]
        assert got.global_ids == one.batch_ids(p)  # the same samples, split across ranks
        assert got.rank_of(got.per_rank[1][3]) == 1 and got.rank_of(-1) is None
    # delivered batches are the recomputed ones
    for _ in range(5):
        ids = ranks[1].next_batch()
        assert ids == list(step_samples(ranks[0], ranks[1].position - 1).per_rank[1])


def test_mix_keys_are_portable_across_layouts():
    mix = DatasetMix({"web": 600, "code": 400})
    assert mix.key(0) == SampleKey("web", 0) and mix.key(600) == SampleKey("code", 0)
    assert mix.key(999) == SampleKey("code", 399) and mix.flat(SampleKey("code", 399)) == 999
    relaid = DatasetMix({"code": 400, "books": 50, "web": 600})
    assert relaid.flat(mix.key(650)) == 50 and relaid.flat(mix.key(10)) == 460
    assert relaid.flat(SampleKey("gone", 1)) is None and mix.flat(SampleKey("code", 400)) is None
    with pytest.raises(ConfigError):
        DatasetMix({"web": 0})
    with pytest.raises(ConfigError):
        mix.key(1000)
    for v in (3, {"dataset": "code", "index": 7}, "code:7", "12"):
        assert SampleKey.from_json(SampleKey.from_json(v).to_json()) == SampleKey.from_json(v)
    for bad in (-1, True, {"index": -2}, "code:x", 1.5):
        with pytest.raises(ConfigError):
            SampleKey.from_json(bad)


def test_listed_samples_never_reach_any_rank_for_any_batch_size_or_world_size(tmp_path):
    path = tmp_path / "skiplist.json"
    sl = SkipList.open(path)
    victims = ResumableSampler(N, batch_size=16, seed=9).global_batch_ids(3)[:5] + [17, 400]
    assert sl.add(victims, reason="test", step=3) == [SampleKey(None, v) for v in victims]
    assert sl.add([17]) == []  # already listed: no change
    again = SkipList.load(path)
    assert again.keys() == sl.keys() and again.note(SampleKey(None, 17)) == {"reason": "test", "step": 3}
    for bs, world in ((16, 1), (8, 2), (5, 3), (32, 1)):
        seen: list[int] = []
        plain: list[int] = []
        for r in range(world):
            s = ResumableSampler(N, batch_size=bs, seed=9, num_replicas=world, rank=r, skiplist=again)
            ref = ResumableSampler(N, batch_size=bs, seed=9, num_replicas=world, rank=r)
            for _ in range(len(s) * 2):  # two epochs
                seen += s.next_batch()
                plain += ref.next_batch()
        assert not set(seen) & set(victims)
        assert seen == [i for i in plain if i not in set(victims)] and len(seen) < len(plain)
    # positions mean the same with or without the list: the ids of a batch are its unlisted ones
    plain = ResumableSampler(N, batch_size=16, seed=9)
    listed = ResumableSampler(N, batch_size=16, seed=9, skiplist=again)
    for p in range(10):
        assert listed.batch_ids(p) == [i for i in plain.batch_ids(p) if i not in set(victims)]
    # removing a sample puts it back
    assert again.remove([17, 99999]) == [SampleKey(None, 17)] and 17 not in again and victims[0] in again
    assert json.loads(path.read_text())["samples"][0]["id"] == min(v for v in victims if v != 17)


def test_skiplist_over_a_mix_keeps_named_samples_out_after_the_mix_is_rebuilt(tmp_path):
    mix = DatasetMix({"web": 600, "code": 400})
    sl = SkipList(tmp_path / "s.json", mix=mix)
    sl.add([650, SampleKey("web", 3)])
    relaid = DatasetMix({"code": 400, "web": 600})
    back = SkipList.load(tmp_path / "s.json", mix=relaid)
    assert 50 in back and 403 in back and 650 not in back
    assert back.filter(range(45, 55)) == [45, 46, 47, 48, 49, 51, 52, 53, 54]
    plain = SkipList.load(tmp_path / "s.json")  # read without a mix: named keys map to no loader id
    assert 50 not in plain and len(plain) == 2
    plain.mix = relaid
    assert 50 in plain and 403 in plain


def test_bad_skiplist_files_give_clear_errors(tmp_path):
    p = tmp_path / "s.json"
    for text in ("{", json.dumps({"format": "x"}),
                 json.dumps({"format": "lossguard-skiplist", "version": 1, "samples": [{"id": -3}]})):
        p.write_text(text)
        with pytest.raises(LossguardError) as e:
            SkipList.load(p)
        assert str(p) in str(e.value)


def test_prefetching_loader_drops_a_sample_listed_while_its_batch_was_prefetched():
    torch = pytest.importorskip("torch")
    from lossguard.data.loader import ResumableLoader

    ds = torch.utils.data.TensorDataset(torch.arange(200))
    sl = SkipList()
    s = ResumableSampler(200, batch_size=4, seed=1, skiplist=sl)
    ahead = [s.batch_ids(p) for p in range(1, 6)]
    loader = ResumableLoader(ds, s, num_workers=2, prefetch_factor=2)
    got = []
    for k, (x,) in enumerate(loader):
        got.append(x.tolist())
        if k == 0:  # batches 1..4 are prefetched by now; list one sample of each
            sl.add([ids[0] for ids in ahead])
        if k == 6:
            break
    assert got[1:6] == [ids[1:] for ids in ahead]
    assert s.position == 7 and s.last_batch_ids() == got[-1]


def test_cli_shows_adds_and_removes_entries_and_rejects_bad_input(tmp_path, capsys):
    from lossguard.cli import main

    d = tmp_path / "ck"
    d.mkdir()
    assert main(["skiplist", str(d), "add", "81234", "code:77", "--reason", "looked at it"]) == 0
    assert main(["skiplist", str(d)]) == 0
    out = capsys.readouterr().out
    assert "2 sample(s) listed" in out and "code:77" in out and "81234" in out and "looked at it" in out
    assert main(["skiplist", str(d / "skiplist.json"), "remove", "81234", "5"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 sample(s); 1 listed" in out and "(not listed: 5)" in out
    assert SkipList.load(d / "skiplist.json").keys() == [SampleKey("code", 77)]
    before = (d / "skiplist.json").read_text()
    assert main(["skiplist", str(d), "add", "12", "bad:id:x"]) == 2  # nothing written on a bad id
    assert (d / "skiplist.json").read_text() == before
    assert main(["skiplist", str(tmp_path / "none.json")]) == 2
    assert "no skip list here" in capsys.readouterr().err
    assert main(["skiplist", str(d), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"id": {"dataset": "code", "index": 77}, "reason": "looked at it"}]
