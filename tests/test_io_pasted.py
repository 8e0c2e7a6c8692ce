"""Pasted and captured terminal output (tests/data/pasted): every kind is recognised and read right.

The files are written as people paste them (tqdm redraws, markdown quoting and fences, start-up
noise); see tests/data/pasted/README.md for what each one imitates.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lossguard.errors import LogFormatError, LossguardError
from lossguard.io import detect_format, read_log
from lossguard.io import pasted
from lossguard.io._paste_lines import LineKind, parse_line
from lossguard.stitch import stitch

PASTED = Path(__file__).parent / "data" / "pasted"


def _live(log, metric):
    steps, values = log.live(metric)
    return steps.tolist(), values


def test_hf_trainer_capture_numbers_dicts_by_the_bar_above_them_and_keeps_nan():
    log = read_log(PASTED / "hf_trainer_grad_norm_nan.log")
    assert log.format == "text"  # issue 18: the dicts take their step from the tqdm bar's N/750 (the grammar)
    steps, loss = _live(log, "loss")
    assert steps == list(range(10, 151, 10))  # what --logging-steps 10 gives (the next test), read from the bar
    assert any("pass --logging-steps N" in w and "counter" in w for w in log.metadata["warnings"])
    assert loss[:3].tolist() == pytest.approx([2.85, 2.8, 2.75])
    assert np.isnan(loss[3:]).all()
    _, grad = _live(log, "grad_norm")
    assert int(np.isnan(grad).sum()) == 12
    _, epoch = _live(log, "epoch")
    assert epoch[-1] == pytest.approx(0.2)


def test_hf_dicts_without_a_counter_are_numbered_by_order_with_a_warning(tmp_path):
    p = tmp_path / "hf.log"
    p.write_text("".join(f"{{'loss': {2.5 - k / 10}, 'learning_rate': 1e-05, 'epoch': {k / 100}}}\n" for k in range(1, 6)))
    log = read_log(p)
    assert log.format == "pasted"
    assert _live(log, "loss")[0] == [1, 2, 3, 4, 5]
    assert any("pass --logging-steps N (TrainingArguments.logging_steps)" in w for w in log.metadata["warnings"])


def test_hf_trainer_capture_with_logging_steps_option():
    log = pasted.read(PASTED / "hf_trainer_grad_norm_nan.log", logging_steps=10)
    assert log.series["loss"].steps.tolist() == list(range(10, 151, 10))
    assert "warnings" not in log.metadata


def test_hf_issue_paste_reads_logging_steps_from_the_args_dump_and_places_eval():
    log = read_log(PASTED / "hf_trainer_issue_paste.md")
    assert log.metadata["logging_steps"] == 5
    assert _live(log, "loss")[0] == [5, 10, 15, 20, 25, 30]
    assert _live(log, "val_loss")[0] == [15]  # the eval dict after the 3rd training dict
    assert np.isnan(_live(log, "grad_norm")[1][-2:]).all() and np.isfinite(_live(log, "grad_norm")[1][:-2]).all()
    assert "train_runtime" not in log.series  # the final summary is an average, not a point
    assert len(log.series["loss"]) == 6


def test_nanogpt_quoted_comment():
    log = read_log(PASTED / "nanogpt_quoted.md")
    steps, loss = _live(log, "loss")
    assert steps == list(range(2950, 3041, 10))
    assert np.isnan(loss[steps.index(3010):]).all() and np.isfinite(loss[:steps.index(3010)]).all()
    assert _live(log, "iter_time")[1][0] == pytest.approx(0.0961, abs=1e-4)  # "96.1ms" in seconds
    assert _live(log, "val_loss")[0] == [3000]
    assert _live(log, "eval_train_loss")[0] == [3000]  # the eval estimate is not the step's loss


def test_llmc_fence_with_z_scores_and_val_lines():
    log = read_log(PASTED / "llmc_fence.txt")
    assert _live(log, "loss")[0] == list(range(1, 41))
    assert _live(log, "val_loss")[0] == [0, 20]
    assert _live(log, "grad_norm")[1][0] == pytest.approx(1.22)
    assert _live(log, "iter_time")[1].max() < 1.0  # "312.40 ms" read in seconds


def test_modded_nanogpt_backticked():
    log = read_log(PASTED / "modded_nanogpt.txt")
    steps, _ = _live(log, "loss")
    assert steps[:3] == [1, 2, 3] and steps[-1] == 130 and len(steps) == 34
    assert _live(log, "val_loss")[0] == [0, 125]
    assert np.isnan(_live(log, "iter_time")[1][0])  # "step_avg:nanms" at step 0


def test_mlx_lm():
    log = read_log(PASTED / "mlx_lm_lora.txt")
    steps, loss = _live(log, "loss")
    assert steps == list(range(10, 101, 10))
    assert int(np.isnan(loss).sum()) == 3
    assert _live(log, "val_loss")[0] == [1, 50]
    assert _live(log, "lr")[1][0] == pytest.approx(1e-5)
    assert log.metadata["tools"] == ["mlx_lm"]  # its "Iter N:" lines are not nanoGPT's "iter N:"


def test_deepspeed_overflows_without_steps_become_a_loss_scale_curve():
    log = read_log(PASTED / "deepspeed_overflow_tqdm.log")
    steps, scale = _live(log, "loss_scale")
    assert steps == list(range(1, 17))  # rank 0's 16 overflows, by order (rank 1 repeats them)
    assert scale[0] == 32768 and scale[-1] == 1
    assert any(e["event"] == "loss_scale_at_minimum" and e["step"] == 17 for e in log.events)
    assert sum(e["event"] == "fp16_overflow" for e in log.events) == 16


def test_mmcv_epoch_lines_use_the_global_iteration():
    log = read_log(PASTED / "mmdet_epoch_nan.log")
    steps, loss = _live(log, "loss")
    assert steps == [50, 100, 150, 200, 250, 300, 350, 400]  # Epoch [2][50/200] is iteration 250
    assert int(np.isnan(loss).sum()) == 3
    assert _live(log, "epoch")[1].tolist() == [1.0] * 4 + [2.0] * 4
    assert "eta" not in log.series


def test_mmengine_iter_lines_inf_and_NaN():
    log = read_log(PASTED / "mmengine_iter_quoted.md")
    steps, loss = _live(log, "loss")
    assert steps == list(range(50, 501, 50))
    assert loss[steps.index(400)] == math.inf and np.isnan(loss[steps.index(450):]).all()


def test_megatron_fragment_is_read():
    log = read_log(PASTED / "megatron_deepspeed_fragment.md")
    steps, loss = _live(log, "loss")
    assert steps == list(range(2010, 2061, 10))
    assert loss[-1] == pytest.approx(29.31)


def test_megatron_fragment_lines_parse_on_their_own():
    hit = parse_line("> ` iteration 2040/ 500000 | lm loss: NAN | loss scale: 1.0 | grad norm: Infinity |`")
    assert hit.kind is LineKind.STEPPED and hit.step == 2040
    assert math.isnan(hit.metrics["loss"]) and hit.metrics["grad_norm"] == math.inf


@pytest.mark.parametrize("spelling,expected", [("nan", "nan"), ("NaN", "nan"), ("NAN", "nan"), ("inf", math.inf),
                                               ("-inf", -math.inf), ("Infinity", math.inf), ("-Infinity", -math.inf)])
def test_non_finite_spellings(spelling, expected):
    hit = parse_line(f"iter 7: loss {spelling}, time 95.12ms, mfu 12.3%")
    value = hit.metrics["loss"]
    assert math.isnan(value) if expected == "nan" else value == expected


def test_a_paste_after_long_startup_output_is_found_past_the_head(tmp_path):
    p = tmp_path / "train.out"
    p.write_text("".join(f"[rank0] loading shard {i:06d} of the dataset ......\n" for i in range(4000))
                 + "iter 10: loss 3.21, time 90.00ms, mfu 10.00%\niter 20: loss 3.10, time 90.00ms, mfu 10.00%\n")
    assert p.stat().st_size > 128 * 1024
    assert detect_format(p) == "pasted"
    assert read_log(p).series["loss"].steps.tolist() == [10, 20]


def test_a_restart_in_the_paste_is_a_new_segment(tmp_path):
    p = tmp_path / "paste.txt"
    p.write_text("iter 10: loss 3.0\niter 20: loss 2.9\niter 30: loss 9.9\niter 20: loss 2.9\niter 30: loss 2.8\n")
    log = read_log(p)
    assert len(log.segments) == 2 and log.segments[1].kind == "rollback"
    assert log.live("loss")[1].tolist() == [3.0, 2.9, 2.8]


def test_text_without_progress_lines_is_not_claimed(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("We tried lr 3e-4 and the step time was fine.\nNo numbers here.\n")
    assert detect_format(p) is None
    with pytest.raises(LogFormatError, match="no training progress line"):
        pasted.read(p)


def test_csv_and_jsonl_are_not_claimed(tmp_path):
    c = tmp_path / "a.csv"
    c.write_text("step,loss\n1,2.0\n")
    j = tmp_path / "a.jsonl"
    j.write_text('{"step": 1, "loss": 2.0}\n')
    assert detect_format(c) == "csv" and detect_format(j) == "jsonl"


def test_analyze_reads_a_paste_on_stdin():
    text = (PASTED / "nanogpt_quoted.md").read_bytes()
    done = subprocess.run([sys.executable, "-m", "lossguard", "analyze", "-", "--json"], input=text,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    doc = json.loads(done.stdout)
    assert doc["incidents"], "the NaN losses at iter 3010+ must be named"
    info = subprocess.run([sys.executable, "-m", "lossguard", "info", "-"], input=text, capture_output=True,
                          timeout=120)
    assert info.returncode == 0, info.stderr.decode()
    assert b"<stdin>" in info.stdout and b"pasted" in info.stdout


def test_stdin_that_is_not_a_log_is_a_clear_error():
    done = subprocess.run([sys.executable, "-m", "lossguard", "info", "-"], input=b"hello\nworld\n",
                          capture_output=True, timeout=120)
    assert done.returncode == 2
    assert b"<stdin>" in done.stderr and b"Traceback" not in done.stderr
    assert b"lossguard-stdin-" not in done.stderr  # the temp file's name never leaks


def test_overflow_lines_first_then_megatron_iterations_stay_megatron(tmp_path):
    p = tmp_path / "train.log"
    overflow = "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768\n"
    p.write_text(overflow + "x" * 80 + "\n" + "".join(f"[rank0] loading shard {i:06d}\n" for i in range(4000))
                 + " iteration      100/  1000 | lm loss: 2.1E+00 | loss scale: 32768.0 |\n"
                 + " iteration      200/  1000 | lm loss: 2.0E+00 | loss scale: 32768.0 |\n")
    assert detect_format(p) != "pasted"


def test_hf_dicts_of_a_resumed_run_are_placed_by_their_epoch(tmp_path):
    p = tmp_path / "resumed.log"
    first = [repr({"loss": 2.0 - k * 0.1, "learning_rate": 1e-4, "epoch": round(k * 0.1, 2)}) for k in range(1, 9)]
    resumed = [repr({"loss": 1.5 - k * 0.1, "learning_rate": 1e-4, "epoch": round(0.5 + k * 0.1, 2)})
               for k in range(1, 4)]
    p.write_text("\n".join(first + ["Resuming from checkpoint-50"] + resumed) + "\n")
    log = stitch(pasted.read(p, logging_steps=10))
    assert [g.kind for g in log.segments] == ["start", "rollback"]
    steps, _ = log.live("loss")
    assert steps.tolist() == [10, 20, 30, 40, 50, 60, 70, 80]  # 60-80 now from the resumed run
    assert log.series["loss"].steps[-3:].tolist() == [60, 70, 80]
    assert log.live("loss")[1][-1] == pytest.approx(1.2)


def _startup(n: int) -> str:
    return "".join(f"[rank0] loading shard {i:06d} of the dataset ......\n" for i in range(n))


def test_sniff_past_the_head_is_bounded_in_bytes(tmp_path, monkeypatch):
    p = tmp_path / "train.out"
    p.write_text(_startup(8000) + "iter 10: loss 3.21, time 90.00ms\n")  # the line at ~400 KB
    assert detect_format(p) == "pasted"
    monkeypatch.setattr(pasted, "SNIFF_SCAN_BYTES", 128 * 1024)
    assert detect_format(p) is None
    assert pasted.read(p).series["loss"].steps.tolist() == [10]  # --format pasted still reads it


def test_sniff_past_the_head_gives_up_after_many_look_alike_lines(tmp_path, monkeypatch):
    p = tmp_path / "notes.txt"
    look_alike = "".join(f"in step {i}: we changed nothing\n" for i in range(50))  # no known tool's line
    p.write_text(_startup(2000) + look_alike + "iter 10: loss 3.21, time 90.00ms\n")
    assert detect_format(p) == "pasted"
    monkeypatch.setattr(pasted, "SNIFF_MAX_CHECKS", 20)
    assert detect_format(p) is None


def test_past_the_head_the_first_deciding_line_wins(tmp_path):
    mega = " iteration      100/  1000 | lm loss: 2.1E+00 | loss scale: 32768.0 |\n"
    paste = "iter 10: loss 3.21, time 90.00ms\n"
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("using world size: 8, data-parallel size: 8\n" + _startup(2000) + mega + paste)
    b.write_text(_startup(2000) + paste + mega)
    assert not pasted.sniff(a, a.read_bytes()[:64 * 1024]) and detect_format(a) == "megatron"
    assert pasted.sniff(b, b.read_bytes()[:64 * 1024])


def test_an_unterminated_last_progress_line_past_the_head_is_found(tmp_path):
    p = tmp_path / "train.out"
    p.write_text(_startup(2000) + "iter 10: loss 3.21, time 90.00ms")
    assert detect_format(p) == "pasted"


def test_megatron_first_line_needs_the_whole_word():
    from lossguard.io import megatron

    assert megatron.first_line(b"x\n iteration 5/ 10 | lm loss: 2.0 |\n") == 3
    assert megatron.first_line(b"reiteration 5/ 10 | lm loss: 2.0 |\n") == -1
    assert megatron.first_line(b"[deepspeed] OVERFLOW! Rank 0 Skipping step.", overflow=False) == -1
    assert megatron.first_line(b"[deepspeed] OVERFLOW! Rank 0 Skipping step.") == 12


def test_analyze_numbers_a_piped_hf_paste_with_logging_steps():
    text = (PASTED / "hf_trainer_grad_norm_nan.log").read_bytes()
    done = subprocess.run([sys.executable, "-m", "lossguard", "analyze", "-", "--logging-steps", "10", "--json"],
                          input=text, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    run = json.loads(done.stdout)["run"]
    assert (run["first_step"], run["last_step"]) == (10, 150)
    assert run["metrics"]["loss"]["first_nonfinite_step"] == 40  # the 4th dict, as the Trainer counted
    for bad in ("0", "-3"):
        refused = subprocess.run([sys.executable, "-m", "lossguard", "analyze", "-", "--logging-steps", bad],
                                 input=text, capture_output=True, timeout=120)
        assert refused.returncode == 2 and b"--logging-steps (logging_steps) must be a positive" in refused.stderr
        assert b"Traceback" not in refused.stderr


def test_read_log_passes_logging_steps_to_the_paste_reader_only(tmp_path):
    log = read_log(PASTED / "hf_trainer_grad_norm_nan.log", logging_steps=5)
    assert log.series["loss"].steps.tolist() == list(range(5, 76, 5))
    c = tmp_path / "a.csv"
    c.write_text("step,loss\n3,2.0\n7,1.9\n")
    assert read_log(c, logging_steps=5).series["loss"].steps.tolist() == [3, 7]  # CSV steps are its own
    with pytest.raises(LossguardError, match="logging_steps"):
        read_log(c, logging_steps=True)
