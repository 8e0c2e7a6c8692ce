"""TensorBoard reader: files written by the real writers, every point kept, corruption reported.

Writers: tensorboardX.SummaryWriter, torch.utils.tensorboard.SummaryWriter (old and new style),
and tensorboard's own EventFileWriter with TF2-style tensor summaries built from
tensorboard.compat.proto. Values are compared exactly against what was written (float32 for
simple_value, as stored), and against tensorboard's EventAccumulator as an independent oracle.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from lossguard.errors import LogFormatError
from lossguard.io import tensorboard as tb
from lossguard.stitch import stitch

tensorboardX = pytest.importorskip("tensorboardX")


def _event_file(directory: Path) -> Path:
    files = sorted(directory.glob("events.out.tfevents.*"))
    assert len(files) == 1, files
    return files[0]


@pytest.fixture(scope="module")
def tbx_big(tmp_path_factory) -> tuple[Path, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """10,050 loss points (more than EventAccumulator's 10,000 default) from step 0; grad_norm and
    lr every 5th step. Written by tensorboardX.SummaryWriter."""
    d = tmp_path_factory.mktemp("tbx_big")
    rng = np.random.default_rng(1)
    n = 10_050
    loss = 3 + rng.standard_normal(n)
    loss[7], loss[8] = np.nan, np.inf
    every5 = np.arange(0, n, 5)
    grad = rng.random(len(every5))
    grad[::9] = 0.0  # proto3 does not write a 0.0 simple_value
    lr = np.linspace(0, 3e-4, len(every5))
    w = tensorboardX.SummaryWriter(str(d), flush_secs=3600, max_queue=1 << 20)
    for step in range(n):
        w.add_scalar("train/loss", float(loss[step]), step)
        if step % 5 == 0:
            w.add_scalar("train/grad_norm", float(grad[step // 5]), step)
            w.add_scalar("train/lr", float(lr[step // 5]), step)
    w.close()
    truth = {"train/loss": (np.arange(n), loss), "train/grad_norm": (every5, grad), "train/lr": (every5, lr)}
    return _event_file(d), truth


_METRIC = {"train/loss": "loss", "train/grad_norm": "grad_norm", "train/lr": "lr"}


def test_tensorboardx_every_point_kept_with_step_zero(tbx_big):
    path, truth = tbx_big
    log = tb.read(path)
    assert log.format == "tensorboard"
    assert set(log.metrics) == {"loss", "grad_norm", "lr"}
    for tag, (steps_written, values_written) in truth.items():
        steps, values = log.live(_METRIC[tag])
        assert steps[0] == 0 and np.array_equal(steps, steps_written)
        np.testing.assert_array_equal(values, values_written.astype(np.float32).astype(np.float64))
    assert len(log.live("loss")[0]) == 10_050
    assert np.isnan(log.live("loss")[1][7]) and np.isinf(log.live("loss")[1][8])
    assert (log.live("grad_norm")[1][::9] == 0).all()
    assert len(log.segments) == 1
    seg = log.segments[0]
    assert seg.source == str(path) and abs(seg.start_time - path.stat().st_mtime) < 600
    assert log.metadata["file_version"].startswith("brain.Event")


def test_agrees_with_event_accumulator(tbx_big):
    """Independent oracle: tensorboard's own loader, told to keep everything."""
    ea_mod = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    path, _ = tbx_big
    acc = ea_mod.EventAccumulator(str(path), size_guidance={ea_mod.SCALARS: 0})
    acc.Reload()
    log = tb.read(path)
    for tag, metric in _METRIC.items():
        events = acc.Scalars(tag)
        steps, values = log.live(metric)
        assert np.array_equal(steps, [e.step for e in events])
        np.testing.assert_array_equal(values, [e.value for e in events])


def test_sniff_recognises_content_not_name(tbx_big, tmp_path):
    path, _ = tbx_big
    renamed = tmp_path / "whatever.bin"
    renamed.write_bytes(path.read_bytes())
    assert tb.sniff(renamed, renamed.read_bytes()[:65536])
    assert not tb.sniff(tmp_path / "x.csv", b"step,loss\n1,2.0\n")
    assert not tb.sniff(tmp_path / "x", b"")


def test_torch_summary_writer_old_and_new_style(tmp_path):
    torch_tb = pytest.importorskip("torch.utils.tensorboard")
    from torch.utils.tensorboard.summary import scalar

    rng = np.random.default_rng(2)
    n = 300
    loss, gn, lr = rng.random(n) * 4, rng.random(n), rng.random(n) * 1e-3
    w = torch_tb.SummaryWriter(str(tmp_path))
    for i in range(n):
        w.add_scalar("loss", loss[i], i)  # old style: simple_value
        w.add_scalar("grad_norm", gn[i], i, new_style=True)  # tensor float_val, scalars plugin
        # new style, double precision: the public writer API exposes it through the summary op
        w._get_file_writer().add_summary(scalar("lr", lr[i], new_style=True, double_precision=True), i)
    w.close()
    log = tb.read(tmp_path)
    np.testing.assert_array_equal(log.live("loss")[0], np.arange(n))
    np.testing.assert_array_equal(log.live("loss")[1], loss.astype(np.float32))
    np.testing.assert_array_equal(log.live("grad_norm")[1], gn.astype(np.float32))
    np.testing.assert_array_equal(log.live("lr")[1], lr)  # float64 kept exactly


def _tf2_event(step: int, tag: str, value: float, variant: str, wall: float):
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

    meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    shape = tensor_shape_pb2.TensorShapeProto()
    if variant == "content_f32":
        t = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=shape,
                                   tensor_content=np.float32(value).tobytes())
    elif variant == "float_val":
        t = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=shape, float_val=[value])
    elif variant == "double_val":
        t = tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, tensor_shape=shape, double_val=[value])
    elif variant == "content_f64":
        t = tensor_pb2.TensorProto(dtype=types_pb2.DT_DOUBLE, tensor_shape=shape,
                                   tensor_content=np.float64(value).tobytes())
    else:  # half_val: float16 bits in a varint
        bits = int(np.float16(value).view(np.uint16))
        t = tensor_pb2.TensorProto(dtype=types_pb2.DT_HALF, tensor_shape=shape, half_val=[bits])
    # TF2 writes the plugin metadata with the first value of a tag only
    v = summary_pb2.Summary.Value(tag=tag, tensor=t, metadata=meta if step == 0 else None)
    return event_pb2.Event(wall_time=wall, step=step, summary=summary_pb2.Summary(value=[v]))


def test_tf2_tensor_summaries_written_by_event_file_writer(tmp_path):
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    variants = ["content_f32", "float_val", "double_val", "content_f64", "half_val"]
    rng = np.random.default_rng(3)
    n = 200
    truth = {v: rng.random(n) * 10 for v in variants}
    w = EventFileWriter(str(tmp_path))
    t0 = time.time()
    for step in range(n):
        for v in variants:
            w.add_event(_tf2_event(step, f"metrics/{v}", float(truth[v][step]), v, t0 + step))
    w.close()
    log = tb.read(tmp_path)
    exact = {"content_f32": np.float32, "float_val": np.float32, "double_val": np.float64,
             "content_f64": np.float64, "half_val": np.float16}
    for v in variants:
        name = f"metrics/{v}"
        steps, values = log.live(name)
        np.testing.assert_array_equal(steps, np.arange(n))
        np.testing.assert_array_equal(values, truth[v].astype(exact[v]).astype(np.float64))


@pytest.mark.parametrize("writer", ["tensorboardX", "torch"])
def test_add_scalars_streams_stay_separate(tmp_path, writer):
    if writer == "torch":
        w = pytest.importorskip("torch.utils.tensorboard").SummaryWriter(str(tmp_path))
    else:
        w = tensorboardX.SummaryWriter(str(tmp_path))
    for step in range(50):
        w.add_scalars("loss", {"cm4": 2.0 + step / 100, "pmd": 3.0 - step / 100}, step)
        w.add_scalar("loss", 2.5, step)
    w.close()
    log = tb.read(tmp_path)
    assert {"loss", "loss/cm4", "loss/pmd"} <= set(log.metrics)
    np.testing.assert_array_equal(log.live("loss/cm4")[1], np.float32(2.0 + np.arange(50) / 100))
    np.testing.assert_array_equal(log.live("loss/pmd")[1], np.float32(3.0 - np.arange(50) / 100))
    np.testing.assert_array_equal(log.live("loss")[1], np.full(50, 2.5))


def test_resume_after_rollback_two_files_dead_points(tmp_path):
    """Run 1 logs steps 0..99 and dies; run 2 resumes from the checkpoint at step 80 in a new file."""
    first = tensorboardX.SummaryWriter(str(tmp_path), filename_suffix=".a")
    for step in range(100):
        first.add_scalar("loss", 5.0 - step * 0.01, step)
        first.add_scalar("grad_norm", 1.0, step)
    first.close()
    time.sleep(1.1)  # a later wall time (and file name) for the resumed run
    second = tensorboardX.SummaryWriter(str(tmp_path), filename_suffix=".b")
    for step in range(80, 150):
        second.add_scalar("loss", 4.0 - step * 0.01, step)
        second.add_scalar("grad_norm", 2.0, step)
    second.close()
    log = stitch(tb.read(tmp_path))
    assert [g.kind for g in log.segments] == ["start", "rollback"]
    assert log.segments[1].superseded == 2 * 20  # steps 80..99 of two metrics
    s = log.series["loss"]
    dead = s.steps[~s.alive]
    np.testing.assert_array_equal(dead, np.arange(80, 100))
    steps, values = log.live("loss")
    np.testing.assert_array_equal(steps, np.arange(150))
    np.testing.assert_allclose(values[80:], 4.0 - np.arange(80, 150) * 0.01, rtol=1e-6)
    assert log.segments[0].start_time < log.segments[1].start_time


def test_steps_going_back_inside_one_file_start_a_segment(tmp_path):
    w = tensorboardX.SummaryWriter(str(tmp_path))
    for step in list(range(0, 51)) + list(range(30, 61)):
        w.add_scalar("loss", float(step), step)
        w.add_scalar("lr", 1e-3, step)
    w.close()
    log = tb.read(tmp_path)
    assert len(log.segments) == 2 and "restart" in log.segments[1].note
    log = stitch(log)
    s = log.series["loss"]
    np.testing.assert_array_equal(s.steps[~s.alive], np.arange(30, 51))
    assert log.segments[1].kind == "rollback"


def test_many_tags_of_one_length_use_the_slow_path_correctly(tmp_path):
    """60 tags of equal length exceed the template budget; the rest is decoded record by record."""
    w = tensorboardX.SummaryWriter(str(tmp_path))
    for step in range(20):
        for k in range(60):
            w.add_scalar(f"m{k:02d}", k + step / 32, step)
        w.add_histogram("weights", np.arange(10.0) + step, step)
        w.add_text("note", f"step {step}", step)
    w.close()
    log = tb.read(tmp_path)
    assert len([m for m in log.metrics if m.startswith("m")]) == 60
    for k in (0, 31, 32, 59):
        np.testing.assert_array_equal(log.live(f"m{k:02d}")[1], np.float32(k + np.arange(20) / 32))


# ---------------------------------------------------------------- corruption

@pytest.fixture()
def small_file(tmp_path) -> Path:
    d = tmp_path / "run"
    w = tensorboardX.SummaryWriter(str(d))
    for step in range(40):
        w.add_scalar("loss", 1.0 + step, step)
    w.close()
    return _event_file(d)


def _record_offsets(data: bytes) -> list[int]:
    offsets, off = [], 0
    while off < len(data):
        offsets.append(off)
        off += 16 + int.from_bytes(data[off:off + 8], "little")
    return offsets


def test_bad_length_crc_names_record_and_offset(small_file):
    data = bytearray(small_file.read_bytes())
    off = _record_offsets(bytes(data))[10]
    data[off + 9] ^= 0xFF  # the CRC of record 11's length
    small_file.write_bytes(bytes(data))
    with pytest.raises(LogFormatError) as e:
        tb.read(small_file)
    msg = str(e.value)
    assert "CRC of the record length" in msg and f"record 11, byte {off}" in msg and str(small_file) in msg
    assert "fix:" in msg


def test_bad_data_crc_names_record(small_file):
    data = bytearray(small_file.read_bytes())
    off = _record_offsets(bytes(data))[25]
    data[off + 12 + 5] ^= 0x01  # one bit of record 26's data
    small_file.write_bytes(bytes(data))
    with pytest.raises(LogFormatError, match=rf"record 26, byte {off}: the CRC of the record data is wrong"):
        tb.read(small_file)


def test_corrupt_length_value_is_not_mistaken_for_truncation(small_file):
    data = bytearray(small_file.read_bytes())
    off = _record_offsets(bytes(data))[5]
    data[off + 6] = 0x7F  # a huge length: would run past the end, but its CRC is wrong
    small_file.write_bytes(bytes(data))
    with pytest.raises(LogFormatError, match="record 6, .*CRC of the record length"):
        tb.read(small_file)


def test_truncated_last_record_reads_intact_prefix_with_warning(small_file):
    data = small_file.read_bytes()
    offsets = _record_offsets(data)
    small_file.write_bytes(data[:offsets[-1] + 20])  # the writer died inside the last record
    log = tb.read(small_file)
    steps, values = log.live("loss")
    np.testing.assert_array_equal(steps, np.arange(39))  # 40 points written, the last one cut
    (warning,) = log.metadata["warnings"]
    assert f"record {len(offsets)}" in warning and "incomplete" in warning
    assert f"{len(offsets) - 1} complete records" in warning
    small_file.write_bytes(data[:offsets[-1] + 5])  # cut inside the 12-byte header
    log = tb.read(small_file)
    assert len(log.live("loss")[0]) == 39
    assert "12-byte record header expected, 5 bytes present" in log.metadata["warnings"][0]


def test_truncated_inside_first_record_is_an_error(small_file):
    small_file.write_bytes(small_file.read_bytes()[:20])
    with pytest.raises(LogFormatError, match="no complete record"):
        tb.read(small_file)


def test_garbage_and_empty_files(tmp_path):
    garbage = tmp_path / "events.out.tfevents.garbage"
    garbage.write_bytes(os.urandom(4096))
    with pytest.raises(LogFormatError, match="CRC of the record length"):
        tb.read(garbage)
    empty = tmp_path / "events.out.tfevents.empty"
    empty.write_bytes(b"")
    with pytest.raises(LogFormatError, match="empty"):
        tb.read(empty)
    with pytest.raises(LogFormatError, match="cannot read"):
        tb.read(tmp_path / "missing.tfevents")
    with pytest.raises(LogFormatError, match="no TensorBoard event file"):
        tb.read(_empty_dir(tmp_path))


def _empty_dir(tmp_path: Path) -> Path:
    d = tmp_path / "nothing"
    d.mkdir()
    return d


def test_valid_framing_but_not_an_event(tmp_path):
    from tensorboard.summary.writer.record_writer import RecordWriter

    path = tmp_path / "events.out.tfevents.notevent"
    with open(path, "wb") as fh:
        RecordWriter(fh).write(b"\x0b\x0c not a protobuf")  # wire type 3 (group): invalid here
    with pytest.raises(LogFormatError, match="record 1, byte 0: the record is not a TensorBoard Event"):
        tb.read(path)


def _stream_run(tmp_path: Path) -> Path:
    """A run dir: main writer + add_scalars stream dirs, then a resumed file killed mid-record."""
    w = tensorboardX.SummaryWriter(str(tmp_path))
    for step in range(60):
        w.add_scalar("train/loss", 3.0, step)
        w.add_scalars("loss", {"cm4": 2.0, "pmd": 2.5}, step)
    w.close()
    time.sleep(1.1)
    w = tensorboardX.SummaryWriter(str(tmp_path), filename_suffix=".resumed")
    for step in range(40, 90):
        w.add_scalar("train/loss", 2.0, step)
    w.close()
    resumed = next(tmp_path.glob("*.resumed"))
    resumed.write_bytes(resumed.read_bytes()[:-3])  # killed inside its last record
    return tmp_path


def _check_stream_run(log) -> None:
    assert {"loss", "loss/cm4", "loss/pmd"} <= set(log.metrics)
    steps, values = log.live("loss")
    np.testing.assert_array_equal(steps, np.arange(89))  # step 89 was in the cut record
    assert (values[40:] == 2.0).all() and (values[:40] == 3.0).all()
    # the streams belong to the first launch: the rollback to step 40 supersedes their steps 40..59 too
    np.testing.assert_array_equal(log.live("loss/cm4")[0], np.arange(40))
    assert len(log.series["loss/cm4"]) == 60
    assert log.summary()["rollbacks"] == 1 and log.series["loss"].alive.sum() == 89
    assert any("incomplete" in w for w in log.metadata["warnings"])


def test_run_directory_streams_join_their_launch(tmp_path):
    log = stitch(tb.read(_stream_run(tmp_path)))
    assert len(log.segments) == 2
    _check_stream_run(log)


def test_read_log_on_a_run_directory(tmp_path):
    from lossguard.io import read_log

    _check_stream_run(read_log(_stream_run(tmp_path)))


def test_fast_path_equals_written_values_for_random_layouts(tmp_path):
    """Hypothesis: records of one length but different layouts (tag length vs step varint length,
    simple_value vs tensor, omitted 0.0 / step 0) must never be decoded with the wrong template."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    tags = ["a", "ab", "abc", "abcd", "loss", "x/y"]
    point = st.tuples(st.sampled_from(tags),
                      st.sampled_from([0, 1, 127, 128, 300, 16383, 16384, 2**21, 2**28, 2**35]),
                      st.one_of(st.just(0.0), st.floats(width=32, allow_nan=False)),
                      st.sampled_from(["simple", "content_f32", "double_val"]))

    @settings(max_examples=40, deadline=None)
    @given(st.lists(point, min_size=1, max_size=120))
    def check(points):
        path = tmp_path / "events.out.tfevents.prop"
        expected: dict[str, list[tuple[int, float]]] = {}
        last: dict[str, int] = {}
        with open(path, "wb") as fh:
            writer = RecordWriter(fh)
            writer.write(event_pb2.Event(wall_time=1.5e9, file_version="brain.Event:2").SerializeToString())
            for i, (tag, step, value, variant) in enumerate(points):
                step += last.get(tag, -1) + 1  # strictly increasing per tag: no restarts here
                last[tag] = step
                if variant == "simple":
                    v = summary_pb2.Summary.Value(tag=tag, simple_value=value)
                else:
                    v = _tf2_event(step, tag, value, variant, 0.0).summary.value[0]
                ev = event_pb2.Event(wall_time=1.5e9 + i, step=step, summary=summary_pb2.Summary(value=[v]))
                writer.write(ev.SerializeToString())
                expected.setdefault(tb.canonical_name(tag), []).append(
                    (step, float(np.float32(value)) if variant != "double_val" else value))
        log = tb.read(path)
        assert set(log.metrics) == set(expected)
        for metric, pts in expected.items():
            steps, values = log.live(metric)
            np.testing.assert_array_equal(steps, [p[0] for p in pts])
            np.testing.assert_array_equal(values, [p[1] for p in pts])

    check()


def test_crc32c_and_its_affine_decomposition():
    """The pure-numpy CRC equals google-crc32c, and the per-byte tables rebuild any CRC."""
    from lossguard.io.tfevents import record as tfr

    google_crc32c = pytest.importorskip("google_crc32c")
    rng = np.random.default_rng(5)
    for length in (0, 1, 7, 8, 33, 200):
        data = rng.integers(0, 256, length, dtype=np.uint8).tobytes()
        assert tfr.crc32c(data) == google_crc32c.value(data)
        if length:
            crc = tfr.crc32c(bytes(length))  # all zeros, then each byte's contribution
            for j, b in enumerate(data):
                crc ^= int(tfr.position_table(length - 1 - j)[b])
            assert crc == google_crc32c.value(data)
    masked = np.array([tfr.masked_crc32c(b"abc")], dtype=np.uint32)
    assert int(tfr.unmask(masked)[0]) == google_crc32c.value(b"abc")
