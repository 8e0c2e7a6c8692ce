"""The save's hashing stream hashes and writes a large buffer in blocks (issue 23): the checksum,
size and item marks it records are still those of the bytes on disk, for buffers of any length
around the block size and of any item size, and a checkpoint written through it with tensors of
several blocks verifies, while a byte flipped inside a later block of one fails its load."""
from __future__ import annotations

import json
import zlib

import pytest

torch = pytest.importorskip("torch")

from lossguard.checkpoint import ShardedCheckpointStore, ShardedTrainState  # noqa: E402
from lossguard.checkpoint.dcp_io import _BLOCK, _HashingStream  # noqa: E402
from lossguard.checkpoint.files import CHECKSUMS, Checksum  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


@pytest.mark.parametrize("algorithm", sorted(CHECKSUMS))
def test_blocked_writes_record_the_files_own_checksum_size_and_marks(tmp_path, algorithm):
    cls = CHECKSUMS[algorithm]
    torch.manual_seed(0)
    floats = torch.randn(_BLOCK + 5)  # 4 blocks and 20 bytes, as a float32 memoryview (len counts floats)
    pieces = [b"PK\x03\x04header", bytes(range(256)) * (_BLOCK // 256), bytearray(b"x" * (_BLOCK + 1)),
              memoryview(floats.numpy()), memoryview(bytes(7)), b"y" * (2 * _BLOCK)]
    path = tmp_path / "blocks.bin"
    marks = {}
    with open(path, "wb") as raw:
        stream = _HashingStream(raw, cls)
        for piece in pieces:
            assert stream.write(piece) == memoryview(piece).nbytes
            stream.tell()
            marks[stream.size] = stream.value
        stream.flush()
    data = path.read_bytes()
    assert stream.size == len(data) == sum(memoryview(p).nbytes for p in pieces)
    crc = cls()
    crc.update(data)
    assert stream.value == crc.value
    for pos, value in marks.items():  # each mark is the CRC of the file up to it
        head = cls()
        head.update(data[:pos])
        assert stream.marks[pos] == value == head.value
    if algorithm == "crc32":
        assert stream.value == zlib.crc32(data)


def test_a_checkpoint_of_multi_block_tensors_verifies_and_a_flip_in_a_later_block_is_caught(tmp_path):
    torch.manual_seed(0)
    width = 768  # a 768x768 float32 weight: 2.25 MiB, several blocks
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, width)).sum().backward()
    opt.step()
    state, store = ShardedTrainState(model, opt), ShardedCheckpointStore(tmp_path, keep_last=5)
    for step in (1, 2):
        state.step = step
        state.save(store)
    files = json.loads((store.path_of(2) / "manifest.json").read_text())["files"]
    shard = store.path_of(2) / "__0_0.distcp"
    entry = files[shard.name]
    crc = Checksum()
    crc.update(shard.read_bytes())
    assert entry["size"] == shard.stat().st_size and entry[Checksum.NAME] == crc.hexdigest()
    saved = [p.detach().clone() for p in model.parameters()]
    assert state.restore(store, 2) == 2
    assert all(torch.equal(p, s) for p, s in zip(model.parameters(), saved, strict=True))
    # A byte in the third block of the largest item (a weight or one of its Adam moments).
    from torch.distributed.checkpoint import FileSystemReader

    info = max(FileSystemReader(store.path_of(2)).read_metadata().storage_data.values(), key=lambda i: i.length)
    assert info.length > 3 * _BLOCK
    raw = bytearray(shard.read_bytes())
    raw[info.offset + 2 * _BLOCK + 123] ^= 0x01
    shard.write_bytes(bytes(raw))
    with pytest.warns(UserWarning, match="does not match"):
        assert state.restore(store) == 1  # passed over for the older checkpoint
