"""The item-by-item CRC check of a file read out of order (checkpoint/crc_ranges.py, issue 23), on
real files: reads in any order verify (re-reads, overlapping reads, a read across two items),
tensor-sized reads are hashed once, a flipped byte in a zip header, a tensor's bytes or an item's
tail is caught and the file named, a truncated file fails, a file read without a plan is checked
whole; and, through DCP itself, damage in every item of a real shard and in ``.metadata`` is
named, and a truncated shard fails even without the store's size check."""
from __future__ import annotations

import json
import random

import pytest

from lossguard.checkpoint import crc_ranges
from lossguard.checkpoint.files import Checksum, ChecksumMismatch, Crc32c

# A file of items like a DCP shard's: (header bytes, body bytes); bodies from 64 KiB on are
# hashed while read, smaller ones (a bias, a step counter) are re-read by pread.
_ITEMS = [(300, 200_000), (90, 1_000), (410, 70_000), (64, 0), (150, 300_000), (333, 65_535), (77, 9)]


def _marked_file(tmp_path, cls=Checksum):
    """A file of random items, its marks (every item boundary) and the items' (offset, length)."""
    rng = random.Random(7)
    extend, value, pos = cls.extender(), 0, 0
    data, marks, items = bytearray(), [[0, 0]], []
    for head, body in _ITEMS:
        chunk = rng.randbytes(head + body + 40)  # 40: the item's own zip directory, at its end
        items.append((pos, len(chunk)))
        data += chunk
        value, pos = extend(chunk, value), pos + len(chunk)
        marks.append([pos, value])
    path = tmp_path / "__0_0.distcp"
    path.write_bytes(bytes(data))
    return path, marks, items


def _read_like_torch_load(reader, offset, length, head):
    """An item read the way ``torch.load`` reads one: zip directory at its end first, then the header
    in small reads, then the body in one read."""
    reader.seek(offset + length - 40)
    reader.read(40)
    reader.seek(offset)
    for size in (30, head - 30):
        reader.readinto(bytearray(size))
    body = bytearray(length - head - 40)
    assert reader.readinto(memoryview(body)) == len(body)


def _load(path, marks, items, cls=Checksum, planned=True, order=None):
    with open(path, "rb") as fh:
        reader = crc_ranges.TrackingReader(fh, cls, path.name, marks, items if planned else None)
        for k in order if order is not None else range(len(items)):
            _read_like_torch_load(reader, *items[k], _ITEMS[k][0])
        reader.verify(cls.NAME)


@pytest.mark.parametrize("cls", [Checksum, Crc32c])
def test_reads_in_any_order_verify_and_large_bodies_are_not_read_twice(tmp_path, cls, preads):
    if cls is Crc32c:
        pytest.importorskip("google_crc32c")
    path, marks, items = _marked_file(tmp_path, cls)
    for order in (range(len(items)), [4, 0, 6, 2, 1, 5, 3], [2, 2, 0, 4, 4, 6, 1, 3, 5]):
        preads.clear()
        _load(path, marks, items, cls, order=order)
        # re-read: headers, item tails and small items, once each, however often they were read
        large_bodies = sum(body for _, body in _ITEMS if body >= 1 << 16)
        assert sum(preads) == path.stat().st_size - large_bodies


def test_a_body_read_in_two_overlapping_reads_verifies(tmp_path):
    path, marks, items = _marked_file(tmp_path)
    offset, length = items[0]
    with open(path, "rb") as fh:
        reader = crc_ranges.TrackingReader(fh, Checksum, path.name, marks, items[:1])
        reader.seek(offset + 1000)
        reader.readinto(bytearray(100_000))
        reader.seek(offset + 500)  # back over bytes already hashed, and past them
        reader.readinto(bytearray(150_000))
        reader.verify("crc32")


def test_a_read_across_two_items_from_inside_the_first_verifies(tmp_path):
    """A large read that starts past the first item's cursor and runs into the next item (not what
    torch.load does, but a reader must not depend on it): the gap before it is hashed first."""
    path, marks, items = _marked_file(tmp_path)
    (first, first_len), (second, _) = items[4], items[5]
    with open(path, "rb") as fh:
        reader = crc_ranges.TrackingReader(fh, Checksum, path.name, marks, items[4:6])
        reader.seek(first + 1000)
        reader.readinto(bytearray(first_len - 1000 + 20_000))  # into the second item
        reader.seek(second + 30_000)
        reader.read(1 << 16)
        reader.verify("crc32")


def _flip(path, at):
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("where", ["header", "tensor bytes", "item tail", "small item", "first byte", "last byte"])
@pytest.mark.parametrize("planned", [True, False])
def test_a_flipped_byte_in_an_item_read_is_caught_and_the_file_named(tmp_path, where, planned):
    path, marks, items = _marked_file(tmp_path)
    size = path.stat().st_size
    at = {"header": items[2][0] + 50, "tensor bytes": items[4][0] + 200_000, "item tail": items[0][0] + items[0][1] - 3,
          "small item": items[1][0] + 700, "first byte": 0, "last byte": size - 1}[where]
    _load(path, marks, items, planned=planned)
    _flip(path, at)
    with pytest.raises(ChecksumMismatch, match=r"__0_0\.distcp does not match its CRC-32 "):
        _load(path, marks, items, planned=planned, order=[6, 5, 4, 3, 2, 1, 0])


def test_only_the_items_read_are_checked_with_a_plan_and_all_without(tmp_path):
    path, marks, items = _marked_file(tmp_path)
    _flip(path, items[3][0] + 10)  # an item nobody reads
    with open(path, "rb") as fh:
        reader = crc_ranges.TrackingReader(fh, Checksum, path.name, marks, items[:2])
        for k in (0, 1):
            _read_like_torch_load(reader, *items[k], _ITEMS[k][0])
        reader.verify("crc32")
    with pytest.raises(ChecksumMismatch):
        _load(path, marks, items, planned=False, order=[0, 1])


def test_a_truncated_file_fails(tmp_path):
    path, marks, items = _marked_file(tmp_path)
    path.write_bytes(path.read_bytes()[:items[-1][0] + 5])
    with open(path, "rb") as fh, pytest.raises(ChecksumMismatch, match=r"__0_0\.distcp"):
        reader = crc_ranges.TrackingReader(fh, Checksum, path.name, marks, items)
        reader.verify("crc32")


def test_a_plan_beyond_the_marked_file_is_refused(tmp_path):
    path, marks, items = _marked_file(tmp_path)
    with open(path, "rb") as fh, pytest.raises(ChecksumMismatch, match=r"has \d+ bytes, the manifest recorded"):
        crc_ranges.TrackingReader(fh, Checksum, path.name, marks, [(marks[-1][0] - 10, 100)])


# ---------------------------------------------------------------- through DCP itself
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _dcp_checkpoint(tmp_path):
    from lossguard.checkpoint import ShardedCheckpointStore, ShardedTrainState

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 256)).sum().backward()
    opt.step()
    store = ShardedCheckpointStore(tmp_path, keep_last=5)
    ShardedTrainState(model, opt, step=1).save(store)
    path = store.path_of(1)
    template = ShardedTrainState(model, opt).state_dict()["sharded"]
    return path, json.loads((path / "manifest.json").read_text())["files"], template


def _dcp_load(path, files, template):
    """Plain ``dcp.load`` through the verifying reader (no store, no size check first); the
    ChecksumMismatch DCP wrapped, or None."""
    import torch.distributed.checkpoint as dcp

    from lossguard.checkpoint.dcp_io import verifying_reader
    from lossguard.checkpoint.sharded_layout import rank_key
    from lossguard.checkpoint.sharded_load import mismatch_in

    try:
        dcp.load(dict(template, **{rank_key(0): b""}), storage_reader=verifying_reader(path, files), no_dist=True)
    except BaseException as exc:  # noqa: BLE001  # DCP's CheckpointException is a BaseException
        return mismatch_in(exc) or f"not a mismatch: {exc!r}"
    return None


def test_dcp_damage_in_every_item_of_a_real_shard_is_named(tmp_path):
    path, files, template = _dcp_checkpoint(tmp_path)
    shard = path / "__0_0.distcp"
    assert _dcp_load(path, files, template) is None
    marks = files[shard.name]["marks"]
    items = [(start, end) for (start, _), (end, _) in zip(marks, marks[1:], strict=False) if end > start]
    assert len(items) > 12
    for k, (start, end) in enumerate(items):  # each item once: its zip header, tensor bytes or zip directory
        at = (start + 40, (start + end) // 2, end - 1)[k % 3]
        _flip(shard, at)
        problem = _dcp_load(path, files, template)
        _flip(shard, at)
        assert problem is not None and "__0_0.distcp" in problem, (at, problem)
    assert _dcp_load(path, files, template) is None


def test_dcp_damaged_metadata_and_a_truncated_shard_are_named(tmp_path):
    path, files, template = _dcp_checkpoint(tmp_path)
    meta = path / ".metadata"
    _flip(meta, meta.stat().st_size // 2)
    assert ".metadata" in (_dcp_load(path, files, template) or "")
    _flip(meta, meta.stat().st_size // 2)
    shard = path / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:-100])
    assert "__0_0.distcp" in (_dcp_load(path, files, template) or "")
