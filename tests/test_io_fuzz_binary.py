"""Random and mutated bytes into the TensorBoard and Megatron readers: only LossguardError comes out.

Mutations start from real files (tensorboardX event file, a Megatron log) so that the fuzz reaches
deep into the record decoder, not only the first CRC check.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lossguard.errors import LossguardError
from lossguard.io import megatron, tensorboard

tensorboardX = pytest.importorskip("tensorboardX")

_DIR = Path(tempfile.mkdtemp(prefix="lossguard_fuzz_"))


def _seed_event_file() -> bytes:
    d = _DIR / "tb"
    w = tensorboardX.SummaryWriter(str(d))
    for step in range(30):
        w.add_scalar("loss", 2.0 - step / 10, step)
        w.add_scalar("grad_norm", 0.0 if step % 3 == 0 else step, step)
        if step % 10 == 0:
            w.add_histogram("w", np.arange(5.0), step)
    w.close()
    return next(d.glob("events.out.tfevents.*")).read_bytes()


EVENT = _seed_event_file()
MEGATRON = (
    "using world size: 8\n"
    + "".join(f" iteration {i:8d}/{100:8d} | learning rate: 1.0E-04 | lm loss: {2 + i / 100:.6E} | "
              f"loss scale: 4096.0 | grad norm: 0.3 | number of skipped iterations:   0 |\n" for i in range(1, 12))
    + "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4096, reducing to 2048\n"
    + "[Rank 0] step=12, skipped=1, lr=[0.0001], mom=[(0.9, 0.95)]\n"
).encode()


def _read_both(data: bytes) -> None:
    path = _DIR / "fuzz.bin"
    path.write_bytes(data)
    for reader in (tensorboard, megatron):
        reader.sniff(path, data[:65536])
        try:
            log = reader.read(path)
        except LossguardError:
            continue
        assert log.series  # a successful read has data


@st.composite
def mutated(draw, seed: bytes):
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "delete", "splice"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[pos:pos + draw(st.integers(1, 16))]
        else:
            data[pos:pos + 8] = draw(st.binary(min_size=8, max_size=8))
    return bytes(data)


_SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(st.binary(max_size=2048))
def test_random_bytes(data):
    _read_both(data)


@_SETTINGS
@given(mutated(EVENT))
def test_mutated_event_file(data):
    _read_both(data)


@_SETTINGS
@given(mutated(MEGATRON))
def test_mutated_megatron_log(data):
    _read_both(data)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_valid_framing_with_random_payload(data):
    """Correct CRCs around random payloads: the proto decoder itself is fuzzed."""
    from tensorboard.summary.writer.record_writer import RecordWriter

    payloads = data.draw(st.lists(st.one_of(st.binary(max_size=64), mutated(EVENT[16:60])), min_size=1, max_size=5))
    path = _DIR / "framed.bin"
    with open(path, "wb") as fh:
        writer = RecordWriter(fh)
        for p in payloads:
            writer.write(p)
    _read_both(path.read_bytes())
