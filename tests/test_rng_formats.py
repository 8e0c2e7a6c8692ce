"""The RNG capture's two layouts (issue 23): with torch, Python's and NumPy's integer sequences are
int64 tensors (one object each for ``torch.save`` to pickle, not ~1,250); without torch, lists. Both,
and the lists of a format-1 capture (older checkpoints), restore every generator exactly."""
from __future__ import annotations

import io
import random
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from lossguard.checkpoint.rng import RNG_FORMAT, capture_rng, restore_rng  # noqa: E402


def _draws():
    return random.random(), random.gauss(0, 1), np.random.standard_normal(3).tolist(), torch.rand(3)


def _seed():
    random.seed(11), np.random.seed(12), torch.manual_seed(13)
    random.gauss(0, 1), np.random.standard_normal()  # cached gaussians in both legacy states


def _same(a, b):
    return a[:3] == b[:3] and torch.equal(a[3], b[3])


def _scramble():
    random.seed(99), np.random.seed(99), torch.manual_seed(99)


def test_a_capture_holds_its_integer_sequences_as_tensors_and_round_trips_through_torch_save():
    _seed()
    snap = capture_rng()
    assert snap["format"] == RNG_FORMAT == 2
    assert isinstance(snap["python"][1], torch.Tensor) and snap["python"][1].dtype == torch.int64
    assert list(snap["python"][1].shape) == [625] and isinstance(snap["numpy"]["key"], torch.Tensor)
    assert snap["python"][1].tolist() == list(random.getstate()[1])  # exact: every word below 2**32
    expected = _draws()
    buf = io.BytesIO()
    torch.save(snap, buf)
    buf.seek(0)
    _scramble()
    restore_rng(torch.load(buf, weights_only=True))
    assert _same(_draws(), expected)


def test_a_format_1_capture_of_lists_still_restores():
    _seed()
    py = random.getstate()
    np_state = np.random.get_state(legacy=False)
    old = {"format": 1, "python": py,
           "numpy": {"bit_generator": np_state["bit_generator"],
                     "key": np_state["state"]["key"].astype(np.int64).tolist(), "pos": int(np_state["state"]["pos"]),
                     "has_gauss": int(np_state["has_gauss"]), "gauss": float(np_state["gauss"])},
           "torch": torch.get_rng_state(), "cuda": []}
    expected = _draws()
    _scramble()
    restore_rng(old)
    assert _same(_draws(), expected)


def test_without_torch_the_capture_is_lists_and_restores(monkeypatch):
    _seed()
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    snap = capture_rng()
    monkeypatch.undo()
    assert "torch" not in snap and isinstance(snap["python"][1], tuple) and isinstance(snap["numpy"]["key"], list)
    expected = _draws()[:3]
    _scramble()
    restore_rng(snap)
    assert _draws()[:3] == expected
