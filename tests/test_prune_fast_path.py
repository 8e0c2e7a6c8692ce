"""Pruning reads no manifest when the retention rules would keep every checkpoint name (issue 23):
sound only because the rules keep every step of a subset whenever they keep every step of the set."""
from __future__ import annotations

import random

from lossguard.checkpoint import CheckpointStore
from lossguard.checkpoint.retention import kept_steps


def test_keeping_all_of_a_set_keeps_all_of_any_subset():
    rng = random.Random(0)
    checked = 0
    for _ in range(3000):
        steps = sorted(rng.sample(range(0, 400, rng.choice([1, 5, 10])), rng.randint(1, 12)))
        rules = {"keep_last": rng.randint(1, 6), "keep_every": rng.choice([None, 20, 50]),
                 "min_keep_steps_back": rng.choice([None, 0, 30, 100]),
                 "protected": set(rng.sample(steps, rng.randint(0, min(2, len(steps)))))}
        if not set(steps) <= kept_steps(steps, **rules):
            continue
        subset = sorted(s for s in steps if rng.random() < 0.6)
        assert set(subset) <= kept_steps(subset, **rules), (steps, subset, rules)
        checked += 1
    assert checked > 500


def test_prune_reads_no_manifest_until_something_is_due(tmp_path, monkeypatch):
    store = CheckpointStore(tmp_path, keep_last=2)
    inspected: list[int] = []
    real = store._inspect

    def counting(step, path, *, checksum):
        inspected.append(step)
        return real(step, path, checksum=checksum)

    monkeypatch.setattr(store, "_inspect", counting)
    store.save(1, {"w": 1})
    store.save(2, {"w": 2})
    assert inspected == []  # two names, keep_last=2: nothing could be deleted
    store.save(3, {"w": 3})
    assert sorted(set(inspected)) == [1, 2, 3] and store.steps() == [2, 3]
