"""The text grammar on shapes the round-5 held-out set showed as failure classes: fp16 overflow lines
beside loss lines no specific reader knows (loss-scale evidence), a NaN padded by a fill character,
a counter named after its number, a date glued to a progress bar, old Megatron fields without a
colon. Every example is written here for the test, in the shape a trainer prints it."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from lossguard.analysis import analyze
from lossguard.io import read_log
from lossguard.io.text.overflow import parse_overflow


def _write(tmp_path: Path, text: str, name: str = "train.log") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _kinds(log) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i in analyze(log).incidents:
        out.setdefault(i.kind.value, []).append(int(i.onset))
    return out


@pytest.mark.parametrize("line, scale", [
    ("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768", 32768.0),
    ("OVERFLOW! Skipping step. Attempted loss scale: 65536.0", 32768.0),
    ("[Rank 0] Overflow detected. Skipping step. Attempted loss scale: 1, reducing to 1", 1.0),
    ("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 16384.0", 16384.0),
    ("NOTE: gradient overflow detected, ignoring gradient, setting loss scale to: 64.0", 64.0),
])
def test_overflow_wordings(line, scale):
    hit = parse_overflow(7, line)
    assert hit is not None and hit.scale == scale and hit.line == 7


@pytest.mark.parametrize("line", ["Grad overflow on iteration 1860", "Reducing dynamic loss scale from 4 to 2",
                                  "the loss overflowed and I do not know why"])
def test_lines_that_name_no_skipped_step_are_no_overflow(line):
    assert parse_overflow(1, line) is None


def test_overflow_lines_give_the_loss_scale_of_a_log_that_prints_none(tmp_path):
    """apex-style overflow lines between loss lines of a custom print: the scale halves on every
    step from 300 on, down to its floor: a loss-scale collapse, and a NaN loss where the print says so."""
    lines, scale = [], 65536.0
    for s in range(1, 401):
        if s >= 300:
            scale = max(1.0, scale / 2)
            lines.append(f"Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to {scale}")
        loss = "nan" if s >= 320 else f"{3.0 + 2.0 / math.sqrt(s):.4f}"
        lines.append(f"Train iter {s:8d} loss {loss} Grad Norm 1.234 0.31s/it")
    log = read_log(_write(tmp_path, "\n".join(lines) + "\n"))
    steps, values = log.live("loss_scale")
    assert steps[0] == 300 and values[0] == 32768.0 and values[-1] == 1.0
    assert log.series["skipped_iters"].values.max() == 1
    kinds = _kinds(log)
    assert "loss_scale_collapse" in kinds and abs(kinds["loss_scale_collapse"][0] - 300) <= 2
    assert kinds.get("non_finite") == [320]


def test_overflow_lines_only_at_the_start_are_no_collapse(tmp_path):
    """The opening calibration (the scale falling from 2**23 in the first steps) is no incident."""
    lines, scale = [], 2.0 ** 24
    for s in range(1, 301):
        if s <= 8:
            lines.append(f"OVERFLOW! Skipping step. Attempted loss scale: {scale}")
            scale /= 2
        loss = 3.0 + 2.0 / math.sqrt(s) + 0.01 * math.sin(s)
        lines.append(f"Train iter {s:8d} loss {loss:.6f} Grad Norm 1.0 3.2s/it")
    log = read_log(_write(tmp_path, "\n".join(lines) + "\n"))
    assert log.format == "text" and "loss_scale" in log.series
    assert "loss_scale_collapse" not in _kinds(log)


def test_a_loss_scale_printed_on_the_loss_lines_is_kept(tmp_path):
    lines = []
    for s in range(1, 101):
        if s == 50:
            lines.append("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1024, reducing to 512")
        lines.append(f"step: {s} loss: {2.0 + 1.0 / s:.4f} loss_scale: {1024.0 if s < 50 else 512.0}")
    log = read_log(_write(tmp_path, "\n".join(lines) + "\n"))
    assert len(log.series["loss_scale"]) == 100
    assert any(e.get("event") == "fp16_overflow" and e["step"] == 50 for e in log.events)


def test_a_nan_padded_by_a_fill_character_is_nan(tmp_path):
    rows = [f"[2024/01/02 10:00:{s % 60:02d}] ppocr INFO: epoch: [1/10], global_step: {s * 10}, lr: 0.001000, "
            f"loss: {'nanxxx' if s > 20 else f'{1.0 / s:x<6f}'}, avg_reader_cost: 0.00100 s" for s in range(1, 26)]
    log = read_log(_write(tmp_path, "\n".join(rows) + "\n"))
    steps, values = log.live("loss")
    assert steps[0] == 10 and steps[-1] == 250 and np.isnan(values[-1]) and not np.isnan(values[19])
    assert _kinds(log).get("non_finite") == [210]


def test_a_counter_named_after_its_number_on_a_loss_line(tmp_path):
    rows = [f"0 completed epochs, {b * 100} batches Average training batch loss: {'nan' if b > 5 else 2.0 - 0.1 * b}"
            f"\tValidation loss: 1.5" for b in range(1, 9)]
    text = "after 10 iterations memory (MB) | allocated: 3094.6 | reserved: 4096.0\n" + "\n".join(rows) + "\n"
    log = read_log(_write(tmp_path, text))
    steps, values = log.live("loss")
    assert steps.tolist() == [100 * b for b in range(1, 9)] and np.isnan(values[-1])
    assert _kinds(log).get("non_finite") == [600]


def test_a_date_glued_to_a_bar_is_no_counter(tmp_path):
    rows = [f"[Epoch 0 / Train]:   0% {s}/788222 [28:47<810:51:33,  3.71s/it, loss={2.0 - s / 1000:.4f}, lr=2.5e-5]"
            f"[09/30/22 02:45:{s % 60:02d}] WARNING  found inf" for s in range(400, 430)]
    log = read_log(_write(tmp_path, "\n".join(rows) + "\n"))
    steps, _ = log.live("loss")
    assert steps[0] == 400 and steps[-1] == 429


def test_old_megatron_fields_without_a_colon(tmp_path):
    rows = [f" iteration {s:8d}/    3000 | elapsed time per iteration (ms): 11092.2 | learning rate 7.917E-06 | "
            f"lm loss {'NAN' if s == 700 else f'{7.0 - s / 500:.6E}'} | loss scale {64.0 if s < 500 else 4.0} |"
            for s in range(100, 1300, 100)]
    log = read_log(_write(tmp_path, "\n".join(rows) + "\n"))
    steps, values = log.live("loss")
    assert log.format == "megatron" and steps[0] == 100 and np.isnan(values[steps.tolist().index(700)])
    assert log.live("loss_scale")[1][-1] == 4.0 and log.live("lr")[1][0] == pytest.approx(7.917e-06)


def test_a_second_run_that_passes_a_short_first_run_is_still_a_new_run(tmp_path):
    """Two launches pasted one after the other: the first (3 records, NaN at its last) is retraced by
    the second, which then goes further; the first run's NaN is reported, not superseded."""
    first = ["step 20, loss = 10.19,perp: 17026.9", "step 40, loss = 5.17,perp: 79.4", "step 60, loss = nan,perp: nan"]
    second = [f"step {s}, loss = {4.0 / (s / 20):.4f},perp: 3.0" for s in range(20, 200, 20)]
    text = "\n(0.380 sec/step)\n".join(first) + "\n\nthe other script converges:\n" + "\n".join(second) + "\n"
    log = read_log(_write(tmp_path, text))
    assert any("new run" in w for w in log.metadata["warnings"])
    assert _kinds(log).get("non_finite") == [60]


def test_paddle_fluid_pass_is_the_epoch(tmp_path):
    rows = [f"Pass {p}, batch {b}, loss [{9.2 - 0.01 * (p * 6 + b // 100):.4f} {'nan' if (p, b) >= (1, 300) else 9.1}]"
            for p in range(3) for b in range(0, 600, 100)]
    log = read_log(_write(tmp_path, "\n".join(rows) + "\n"))
    steps, values = log.live("loss")
    assert len(steps) == 18 and np.isnan(values[9]) and not np.isnan(values[8])
    assert "epoch" in log.series and log.metadata["text"]["step_rule"] != "label"


def test_a_message_glued_after_a_bar_is_its_own_line_and_the_bars_loss_is_the_series(tmp_path):
    """A warning printed right after a tqdm redraw lands on the bar's line; its ``(Loss: X)`` has no
    counter of its own and does not beat the bar's ``Batch Loss`` beside the bar's counter."""
    head = "===> Training Epoch: [3/100]...  Learning Rate: 0.000100\n"
    rows = []
    for n in range(1, 41):
        loss = 2.0 + 0.01 * (n % 3) if n < 30 else 40.0 + n
        warn = f"[Warning] Skip this batch! (Loss: {loss + 1.5})" if n >= 30 else ""
        bar = f"Epoch: [3/100]:  {n * 2}%|##  | {n}/50 [00:{n:02d}<00:10,  7.08it/s, Batch Loss: {loss:.4f}]"
        rows.append(bar + warn)
    log = read_log(_write(tmp_path, head + "\r".join(rows) + "\n"))
    steps, values = log.live("loss")
    assert log.metadata["text"]["loss"] == "Batch Loss" and steps[0] == 1 and steps[-1] == 40
    assert values[-1] == pytest.approx(80.0)


def test_only_the_last_pipeline_stage_prints_its_rank(tmp_path):
    """Pipeline parallelism: the loss is printed by the last stage only (``[rank 3]``); its lines are the
    series when no lower rank prints one; where rank 0 prints too, rank 0's lines are kept."""
    rows = [f"[rank 3] Step: {s:<5d} | Loss: {3.0 + 1.0 / s:6.4f} | Tokens/s: 98.1K" for s in range(1, 41)]
    steps, _ = read_log(_write(tmp_path, "rank 0: Creating model config\n" + "\n".join(rows) + "\n")).live("loss")
    assert steps.tolist() == list(range(1, 41))
    both = [f"[rank{r}]: step: {s} loss: {2.0 + r + 1.0 / s:.4f}" for s in range(1, 41) for r in (0, 1)]
    steps, values = read_log(_write(tmp_path, "\n".join(both) + "\n", "both.log")).live("loss")
    assert steps.tolist() == list(range(1, 41)) and values[-1] == pytest.approx(2.0 + 1.0 / 40, abs=1e-4)


def test_basicsr_losses_and_counters_with_thousands_separators(tmp_path):
    rows = [f"2022-12-29 10:43:28,986 INFO: [Model..][epoch: {s // 60:3d}, iter: {s:>9,}, lr:(2.000e-04,)] "
            f"[eta: 6:29:14, time (data): 0.141 (0.001)] l_pix: {0.1 + 10.0 / s:.4e} " for s in range(500, 20500, 500)]
    log = read_log(_write(tmp_path, "\n".join(rows) + "\n"))
    steps, values = log.live("loss")
    assert log.metadata["text"]["loss"] == "l_pix" and steps[0] == 500 and steps[-1] == 20000 and len(steps) == 40
    assert values[1] == pytest.approx(0.1 + 10.0 / 1000, rel=1e-3)


def test_a_crash_line_after_a_printed_nan_adds_no_point(tmp_path):
    """The trainer prints the NaN loss, then raises naming a window of steps: the NaN is where it was
    printed, not one interval later."""
    rows = [f"[{s}] training_loss = {'nan' if s == 2600 else f'{3.0 - s / 2000:.4f}'}" for s in range(50, 2650, 50)]
    rows.append("RuntimeError: The loss became nan or inf somewhere within steps [2550, 2600]")
    log = read_log(_write(tmp_path, "\n".join(rows) + "\n"))
    steps, values = log.live("loss")
    assert steps[-1] == 2600 and np.isnan(values[-1]) and _kinds(log).get("non_finite") == [2600]
