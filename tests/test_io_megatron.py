"""Megatron-LM / Megatron-DeepSpeed / DeepSpeed stdout logs.

The fixture generator below prints lines in the exact layout of Megatron's ``training_log``
(``megatron/training/training.py``: ``' iteration {:8d}/{:8d} |'`` then ``' {key}: {value} |'``
fields) and of DeepSpeed's engine and fp16 optimizer. Real values: the BLOOM-176B spike of
2022-04-12 from tests/data/real-logs (bigscience chronicles), re-printed as the log printed them.
"""
from __future__ import annotations

import csv

import numpy as np
import pytest

from lossguard.errors import LogFormatError
from lossguard.io import megatron, megatron_lines
from lossguard.stitch import stitch

BANNER = """using world size: 64, data-parallel size: 8, tensor-model-parallel size: 4, pipeline-model-parallel size: 2
> building GPT2BPETokenizer tokenizer ...
 > padded vocab (size: 50257) with 175 dummy tokens (new size: 50432)
> initializing torch distributed ...
[after model, optimizer, and learning rate scheduler are built] datetime: {date} 10:00:00
training ...
[before the start of training step] datetime: {date} 10:00:05
"""


def iteration_line(it: int, total: int, *, loss: float | None, lr: float, gn: float | None, scale: float = 4096.0,
                   skipped: int = 0, nan: int = 0, streams: dict[str, float] | None = None) -> str:
    """One Megatron ``training_log`` line, field by field as Megatron formats them."""
    s = f" iteration {it:8d}/{total:8d} |"
    s += f" consumed samples: {it * 2048:12d} |"
    s += f" elapsed time per iteration (ms): {13766.9:.1f} |"
    s += f" learning rate: {lr:.3E} |"
    s += f" global batch size: {2048:5d} |"
    if loss is not None:
        s += f" lm loss: {loss:.6E} |"
    for name, value in (streams or {}).items():
        s += f" lm loss {name}: {value:.6E} |"
    s += f" loss scale: {scale:.1f} |"
    if gn is not None:
        s += f" grad norm: {gn:.3f} |"
    s += " num zeros: 0.0 |"
    s += f" number of skipped iterations: {skipped:3d} |"
    s += f" number of nan iterations: {nan:3d} |"
    return s


def validation_block(it: int, loss: float) -> str:
    text = f" validation loss at iteration {it} | lm loss value: {loss:.6E} | lm loss PPL: {np.exp(loss):.6E} | "
    bar = "-" * (len(text) + 1)
    return f"{bar}\n{text}\n{bar}"


def chain_log(chain: list[tuple[int, int]], *, every_val: int = 50) -> tuple[str, dict[int, list[float]]]:
    """A job chain appending to one file: each launch prints its banner and iterations first..last."""
    out: list[str] = []
    truth: dict[int, list[float]] = {}
    for k, (first, last) in enumerate(chain):
        out.append(BANNER.format(date=f"2022-04-{12 + k:02d}"))
        for it in range(first, last + 1):
            loss = 4.0 - it * 1e-3 + k * 0.5  # each launch distinguishable
            out.append(iteration_line(it, 95367, loss=loss, lr=6e-5, gn=0.2 + k))
            out.append(f"[Rank 0] some unrelated output {it}")
            truth.setdefault(k, []).append(loss)
            if it % every_val == 0:
                out.append(validation_block(it, loss + 0.1))
        out.append(f"[exiting program at iteration {last}] datetime: 2022-04-{12 + k:02d} 20:00:00")
    return "\n".join(out) + "\n", truth


def test_iteration_fields_and_units(tmp_path):
    path = tmp_path / "train.log"
    text, truth = chain_log([(1, 120)])
    path.write_text(text)
    log = megatron.read(path)
    assert log.format == "megatron"
    steps, values = log.live("loss")
    np.testing.assert_array_equal(steps, np.arange(1, 121))
    np.testing.assert_allclose(values, truth[0], rtol=1e-6)  # printed with 7 significant digits
    assert log.live("iter_time")[1][0] == pytest.approx(13.7669)  # ms -> s
    assert log.live("lr")[1][0] == pytest.approx(6e-5)
    assert log.live("loss_scale")[1][0] == 4096.0
    assert set(log.live("skipped_iters")[1]) == {0.0}
    assert {"grad_norm", "nan_iters", "consumed_samples", "global_batch_size", "num_zeros"} <= set(log.metrics)
    vsteps, vvalues = log.live("val_loss")
    np.testing.assert_array_equal(vsteps, [50, 100])
    np.testing.assert_allclose(vvalues, [truth[0][49] + 0.1, truth[0][99] + 0.1], rtol=1e-6)
    assert "val_ppl" in log.metrics
    assert log.segments[0].start_time == pytest.approx(1649757600.0)  # 2022-04-12 10:00:00 UTC
    assert log.series["loss"].segment.max() == 0


def test_restarts_inside_one_file_become_segments_and_stitch(tmp_path):
    # launch 1 reaches 300, launch 2 resumes from the checkpoint at 250, launch 3 resumes at 400
    path = tmp_path / "chain.log"
    text, truth = chain_log([(1, 300), (251, 400), (401, 450)])
    path.write_text(text)
    log = megatron.read(path)
    assert len(log.segments) == 3
    assert all("banner" in g.note for g in log.segments[1:])
    log = stitch(log)
    assert [g.kind for g in log.segments] == ["start", "rollback", "resume"]
    s = log.series["loss"]
    np.testing.assert_array_equal(s.steps[~s.alive], np.arange(251, 301))
    steps, values = log.live("loss")
    np.testing.assert_array_equal(steps, np.arange(1, 451))
    np.testing.assert_allclose(values[250:400], truth[1], rtol=1e-6)


def test_iteration_going_back_without_banner_is_a_restart(tmp_path):
    lines = [iteration_line(i, 1000, loss=2.0, lr=1e-4, gn=0.3) for i in range(10, 21)]
    lines += [iteration_line(i, 1000, loss=1.0, lr=1e-4, gn=0.3) for i in range(15, 31)]
    path = tmp_path / "tee.log"
    path.write_text("\n".join(lines) + "\n")
    log = stitch(megatron.read(path))
    assert len(log.segments) == 2 and "iteration 15 after 20" in log.segments[1].note
    s = log.series["loss"]
    np.testing.assert_array_equal(s.steps[~s.alive], np.arange(15, 21))


def test_duplicate_line_from_two_ranks_is_not_a_restart(tmp_path):
    line = iteration_line(5, 10, loss=2.0, lr=1e-4, gn=0.3)
    path = tmp_path / "dup.log"
    path.write_text(f"[default0]:{line}\n[default7]:{line}\n" + iteration_line(6, 10, loss=2.0, lr=1e-4, gn=0.3))
    log = megatron.read(path)
    assert len(log.segments) == 1 and list(log.live("loss")[0]) == [5, 6]


def test_streams_nan_and_skipped_iterations(tmp_path):
    lines = [
        iteration_line(1, 10, loss=2.5, lr=1e-4, gn=0.3, streams={"cm4": 2.1, "pmd": 2.9}),
        iteration_line(2, 10, loss=None, lr=1e-4, gn=None, skipped=1),  # skipped: Megatron prints no loss
        iteration_line(3, 10, loss=2.4, lr=1e-4, gn=0.3, streams={"cm4": 2.0, "pmd": 2.8}),
        iteration_line(4, 10, loss=2.4, lr=1e-4, gn=0.3, nan=1).replace("2.400000E+00", "nan"),
        " iteration        5/      10 | lm loss: -inf | grad norm: inf | loss scale: 1.0 |",
    ]
    path = tmp_path / "streams.log"
    path.write_text("\n".join(lines) + "\n")
    log = megatron.read(path)
    np.testing.assert_array_equal(log.live("loss/cm4")[1], [2.1, 2.0])
    np.testing.assert_array_equal(log.live("loss/pmd")[0], [1, 3])
    steps, values = log.live("loss")
    np.testing.assert_array_equal(steps, [1, 3, 4, 5])
    assert np.isnan(values[2]) and values[3] == -np.inf
    assert log.live("grad_norm")[1][-1] == np.inf
    np.testing.assert_array_equal(log.live("skipped_iters")[1], [0, 1, 0, 0])
    np.testing.assert_array_equal(log.live("nan_iters")[1], [0, 0, 0, 1])


def test_deepspeed_fp16_overflow_lines(tmp_path):
    """Megatron-DeepSpeed with fp16: overflow lines between iteration lines, and engine lines."""
    lines = ["[2023-08-17 03:12:01,120] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.10.0"]
    scale = 65536.0
    expected_scale, expected_skips = {}, {}
    for it in range(1, 41):
        overflows = 2 if it == 1 else (1 if it in (5, 17) else 0)
        for _ in range(overflows):
            for rank in (0, 1):
                lines.append(f"[deepspeed] OVERFLOW! Rank {rank} Skipping step. Attempted loss scale: "
                             f"{int(scale)}, reducing to {int(scale // 2)}")
            scale /= 2
        if overflows:
            expected_scale[it], expected_skips[it] = scale, overflows
        if it % 10 == 0:
            lines.append(f"[2023-08-17 03:13:{it:02d},000] [INFO] [logging.py:96:log_dist] [Rank 0] step={it}, "
                         f"skipped={sum(expected_skips.values())}, lr=[0.0001, 0.0001], mom=[(0.9, 0.95), (0.9, 0.95)]")
    path = tmp_path / "ds.log"
    path.write_text("\n".join(lines) + "\n")
    log = megatron.read(path)
    # no iteration lines: overflows count into the next logged engine step (10, 20, 30, 40)
    steps, skips = log.live("skipped_iters")
    assert dict(zip(steps.tolist(), skips.tolist(), strict=True)) == {10: 3.0, 20: 1.0, 30: 0.0, 40: 0.0}
    steps, scales = log.live("loss_scale")
    assert dict(zip(steps.tolist(), scales.tolist(), strict=True)) == {10: 8192.0, 20: 4096.0}
    assert list(log.live("lr")[0]) == [10, 20, 30, 40]
    overflow_events = [e for e in log.events if e["event"] == "fp16_overflow"]
    assert len(overflow_events) == 2 * 4 and overflow_events[0]["attempted_scale"] == 65536.0
    assert log.segments[0].start_time is not None


def test_overflow_with_iteration_lines_each_step(tmp_path):
    """With an iteration line per step the overflow lands on its own step; the line's own values win."""
    lines = []
    for it in range(1, 8):
        if it == 4:
            lines.append("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 4096, reducing to 2048")
        lines.append(iteration_line(it, 10, loss=2.0, lr=1e-4, gn=0.3, scale=2048.0 if it >= 4 else 4096.0,
                                    skipped=1 if it == 4 else 0))
    path = tmp_path / "mds.log"
    path.write_text("\n".join(lines) + "\n")
    log = megatron.read(path)
    np.testing.assert_array_equal(log.live("skipped_iters")[1], [0, 0, 0, 1, 0, 0, 0])
    np.testing.assert_array_equal(log.live("loss_scale")[1], [4096] * 3 + [2048] * 4)
    assert [e["step"] for e in log.events] == [4]


def test_fused_optimizer_overflow_wording_is_an_overflow_too(tmp_path):
    """DeepSpeed's fused fp16 optimizer words the overflow without a rank: the same rule reads it
    here and in a paste (one definition, :func:`megatron_lines.parse_overflow`)."""
    lines = [iteration_line(1, 10, loss=2.0, lr=1e-4, gn=0.3, scale=4096.0, skipped=0),
             "[2024-01-02 10:00:00,000] [INFO] [fused_optimizer.py:344:_update_scale] ",
             "fp16 dynamic loss scale overflow! Skipping step. Attempted loss scale: 4096, reducing to 2048",
             iteration_line(2, 10, loss=2.0, lr=1e-4, gn=0.3, scale=2048.0, skipped=1)]
    path = tmp_path / "fused.log"
    path.write_text("\n".join(lines) + "\n")
    log = megatron.read(path)
    assert ([(e["step"], e["rank"], e["attempted_scale"], e["new_scale"]) for e in log.events]
            == [(2, 0, 4096.0, 2048.0)])
    assert megatron_lines.parse_overflow("OVERFLOW! Rank 3 Skipping step. Attempted loss scale: 64") == (
        megatron_lines.Overflow(rank=3, attempted=64.0, reduced=32.0))  # no "reducing to": DeepSpeed halves the scale
    assert megatron_lines.parse_overflow("Attempted loss scale: 64") is None
    # the one overflow rule (io/text/overflow.py): DeepSpeed's newer wording is read here too; apex's and
    # fairseq's lines name no attempted scale and stay the text reader's
    assert megatron_lines.parse_overflow("[Rank 0] Overflow detected. Skipping step. Attempted loss scale: 8, "
                                         "reducing to 4") == megatron_lines.Overflow(rank=0, attempted=8.0, reduced=4.0)
    assert megatron_lines.parse_overflow("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to "
                                         "32768.0") is None
    assert megatron_lines.parse_overflow("NOTE: gradient overflow detected, ignoring gradient, setting loss scale "
                                         "to: 64.0") is None


def test_real_bloom_spike_lines(real_logs, tmp_path):
    """The 2022-04-12 BLOOM-176B spike, re-printed as Megatron-DeepSpeed printed it."""
    rows = [r for r in csv.DictReader(open(real_logs / "bigscience_tr11_176b_excerpts.csv"))
            if r["segment"].startswith("chronicles.md#2022-04-12")]
    lines = [iteration_line(int(r["step"]), 95367, loss=float(r["loss"]), lr=float(r["lr"]), gn=float(r["grad_norm"]))
             for r in rows]
    path = tmp_path / "tr11.log"
    path.write_text("\n".join(lines) + "\n")
    log = megatron.read(path)
    steps, values = log.live("loss")
    np.testing.assert_array_equal(steps, [int(r["step"]) for r in rows])
    np.testing.assert_allclose(values, [float(r["loss"]) for r in rows], rtol=1e-6)
    gsteps, gn = log.live("grad_norm")
    assert gn.max() == pytest.approx(960.351) and gsteps[gn.argmax()] == 31219


def test_the_line_from_the_issue(tmp_path):
    line = (" iteration    31214/   95367 | consumed samples: 63926272 | elapsed time per iteration (ms): 13766.9 | "
            "learning rate: 5.279E-05 | global batch size:  2048 | lm loss: 2.198845E+00 | grad norm: 0.242 | "
            "num zeros: 0.0 | number of skipped iterations:   0 | number of nan iterations:   0 |")
    path = tmp_path / "one.log"
    path.write_text(line + "\n")
    assert megatron.sniff(path, path.read_bytes())
    log = megatron.read(path)
    assert log.live("loss")[1][0] == 2.198845 and log.live("loss")[0][0] == 31214
    assert log.live("consumed_samples")[1][0] == 63926272
    assert log.live("iter_time")[1][0] == pytest.approx(13.7669)


def test_sniff_and_errors(tmp_path):
    csv_file = tmp_path / "a.csv"
    csv_file.write_text("step,loss\n1,2.0\n")
    assert not megatron.sniff(csv_file, csv_file.read_bytes())
    with pytest.raises(LogFormatError, match="no Megatron or DeepSpeed iteration line"):
        megatron.read(csv_file)
    empty = tmp_path / "empty.log"
    empty.write_text("")
    with pytest.raises(LogFormatError, match="no Megatron or DeepSpeed iteration line"):
        megatron.read(empty)
    with pytest.raises(LogFormatError, match="cannot read"):
        megatron.read(tmp_path / "missing.log")
    binary = tmp_path / "bin.log"
    binary.write_bytes(bytes(range(256)) * 10)
    with pytest.raises(LogFormatError):
        megatron.read(binary)
