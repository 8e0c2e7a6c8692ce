"""The text grammar (lossguard.io.text) on the console lines of trainers, written as their sources
print them, and on the shapes people paste: each is read without --format, with the step and loss
a person would call so, and the choice can be overridden and explained."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lossguard.errors import LogFormatError, LossguardError
from lossguard.io import detect_format, read_log
from lossguard.io.text.template import SPLIT, parse

ESC = "\x1b"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _read(path, **kw):
    log = read_log(path, **kw)
    steps, values = log.live("loss")
    return log, steps.tolist(), values


def _labels(line: str) -> list[str]:
    tpl = parse(SPLIT.split(line))
    return list(tpl.labels)


def test_labels_in_every_usual_spelling():
    assert _labels("step: 10  loss:  7.93  grad_norm:  1.2") == ["step", "loss", "grad_norm"]
    assert _labels("loss=2.3, lr=1e-4") == ["loss", "lr"]
    assert _labels("| train loss 7.12 | norm 1.23 |") == ["train loss", "norm"]
    assert _labels("[loss] 2.3 [lr] 0.1") == ["loss", "lr"]
    assert _labels("loss: 2.3456 (2.4567)  lr: 0.0001") == ["loss", "lr"]  # the running average is dropped
    assert _labels("5: loss=tensor(2.3, device='cuda:0')") == ["", "loss"]  # a leading N: counter
    assert _labels('{"epoch": 1, "loss": "7.931"}') == ["epoch", "loss"]
    assert _labels("{'loss': 2.6, 'grad_norm': nan}") == ["loss", "grad_norm"]
    assert _labels("Epoch 0: 45%|####5 | 450/1000 [00:12<00:15, 36.5it/s, loss=2.34, v_num=0]") == \
        ["Epoch", "", "loss", "v_num"]


def test_torchtitan_ansi_between_label_and_number(tmp_path):
    c = {"r": f"{ESC}[31m", "g": f"{ESC}[32m", "y": f"{ESC}[33m", "x": f"{ESC}[39m"}
    lines = [f"[rank0]:[titan] 2025-01-01 10:00:0{k % 10},000 - root - INFO - {c['r']}step: {k:2}  "
             f"{c['g']}loss: {10 - k / 10:7.4f}  {c['y']}grad_norm: {1.5:7.4f}  memory: 12.3GiB(40%){c['x']}\n"
             for k in range(1, 9)]
    log, steps, loss = _read(_write(tmp_path, "titan.log", "".join(lines)))
    assert log.format == "text" and steps == list(range(1, 9))
    assert loss[0] == pytest.approx(9.9) and "grad_norm" in log.series


def test_olmo_core_record_header_then_indented_lines(tmp_path):
    text = "".join(f"[step={k}/100]\n    train/CE loss={10 - k / 10}\n    optim/total grad norm={1 + k / 100}\n"
                   for k in range(1, 7))
    log, steps, loss = _read(_write(tmp_path, "olmo.log", text))
    assert steps == list(range(1, 7)) and loss[2] == pytest.approx(9.7)
    assert log.metadata["text"]["loss"] == "train/CE loss"


def test_composer_batch_header_and_train_loss_lines(tmp_path):
    text = "".join(f"[batch={k}/100]:\n\t Train time/batch: {k - 1}\n\t Train loss/train/total: {5 - k / 10}\n"
                   for k in range(1, 6))
    _, steps, loss = _read(_write(tmp_path, "composer.log", text))
    assert steps == [1, 2, 3, 4, 5] and loss[-1] == pytest.approx(4.5)


def test_keras_epoch_header_then_progress_redraws(tmp_path):
    text = ""
    for e in (1, 2):
        text += f"Epoch {e}/2\n"
        text += "".join(f"\r{b:3d}/100 [=====>.....] - ETA: 2s - loss: {1 - e / 10 - b / 1000:.4f}" for b in (10, 50))
        text += f"\r100/100 [==============================] - 2s 20ms/step - loss: {1 - e / 10 - 0.1:.4f}\n"
    _, steps, loss = _read(_write(tmp_path, "keras.log", text))
    assert steps == [10, 50, 100, 110, 150, 200]  # (epoch - 1) x 100 + batch: "Epoch 2/2" counts from 1


def test_keras_epoch_end_rows_are_numbered_by_epoch(tmp_path):
    text = "".join(f"Epoch {e}/5\n9595/9595 [==============================] - 1s - loss: {1 / e:.4f} - val_loss: 0.5\n"
                   for e in range(1, 6))
    _, steps, _ = _read(_write(tmp_path, "keras1.log", text))
    assert steps == [1, 2, 3, 4, 5]


def test_lightning_bar_with_loss_in_postfix(tmp_path):
    text = "".join(f"\rEpoch {e}: {b // 10}%|###  | {b}/1000 [00:0{e}<00:10, 90.0it/s, "
                   f"loss={3 - e / 10 - b / 10000:.3f}, v_num=0]"
                   for e in (0, 1) for b in (100, 500, 1000))
    _, steps, _ = _read(_write(tmp_path, "lightning.log", text + "\n"))
    assert steps == [100, 500, 1000, 1100, 1500, 2000]  # epoch printed bare (from 0): epoch x 1000 + batch


def test_litgpt_fairseq_accelerate_lines(tmp_path):
    lit = "".join(f"Epoch 1 | iter {k} step {k} | loss train: {3 - k / 10:.3f}, val: n/a | iter time: 120.5 ms\n"
                  for k in range(1, 6))
    assert _read(_write(tmp_path, "litgpt.log", lit))[1] == [1, 2, 3, 4, 5]
    fj = "".join(f'2021-01-01 12:00:{k:02d} | INFO | train_inner | {{"epoch": 1, "update": 0.{k}, '
                 f'"loss": "{8 - k / 10}", "num_updates": "{k * 100}", "gnorm": "1.2"}}\n' for k in range(1, 5))
    log, steps, loss = _read(_write(tmp_path, "fairseq.log", fj))
    assert steps == [100, 200, 300, 400] and loss[0] == pytest.approx(7.9)
    fs = "".join(f"| epoch 001:    {k * 100} / 1000 loss=7.{k}, nll_loss=6.{k}, ppl=99.3, num_updates={k * 100}, "
                 f"lr=0.0001, gnorm=1.23\n" for k in range(1, 5))
    log, steps, _ = _read(_write(tmp_path, "fairseq_simple.log", fs))
    assert steps == [100, 200, 300, 400] and "nll_loss" in log.series
    acc = "".join(f"{k}: loss=tensor({2.5 - k / 10:.4f}, device='cuda:0', grad_fn=<NllLossBackward0>)\n"
                  for k in range(4))
    assert _read(_write(tmp_path, "accelerate.log", acc))[1] == [0, 1, 2, 3]


def test_loss_by_ranked_names_and_alternatives_recorded(tmp_path):
    text = "".join(f"iteration {k} | lm loss: {3 - k / 10} | z_loss: 0.1 | val_loss: 2.0 | nll: {2 - k / 10}\n"
                   for k in range(1, 5))
    log, _, loss = _read(_write(tmp_path, "m.log", text))
    assert log.metadata["text"]["loss"] == "lm loss" and "nll" in log.metadata["text"]["other_losses"]
    assert loss[0] == pytest.approx(2.9)
    nemo = "".join(f"Epoch 0: : {k}it [00:0{k}, 1.0it/s, reduced_train_loss={4 - k / 10:.3f}, global_step={k}.000, "
                   f"consumed_samples=64.0]\n" for k in range(1, 5))
    log, steps, loss = _read(_write(tmp_path, "nemo.log", nemo))
    assert log.metadata["text"]["loss"] == "reduced_train_loss" and loss[0] == pytest.approx(3.9)


def test_only_perplexity_gives_log_ppl(tmp_path):
    text = "".join(f"Epoch[0] Batch [{k * 50}]\tSpeed: 71.18 samples/sec\tperplexity={math.exp(4 - k / 10):.6f}\n"
                   for k in range(1, 6))
    log, steps, loss = _read(_write(tmp_path, "sockeye.log", text))
    assert steps == [50, 100, 150, 200, 250] and loss[0] == pytest.approx(3.9, rel=1e-6)
    assert any("log(perplexity)" in w for w in log.metadata["warnings"])


def test_step_and_loss_keys_override_the_choice(tmp_path):
    text = "".join(f"iter {k} step {k // 2} | loss {3 - k / 10} | xent {2 - k / 10}\n" for k in range(1, 7))
    p = _write(tmp_path, "x.log", text)
    log, steps, loss = _read(p)
    assert steps == [1, 2, 3, 4, 5, 6]  # "step" repeats on the loss lines (litgpt's micro-batches): iter is unique
    assert log.metadata["text"]["other_steps"] == ["step"]
    log, steps, loss = _read(p, step_key="step", loss_key="xent")
    assert steps == [0, 1, 2, 3] and loss[0] == pytest.approx(1.9)  # a step printed twice keeps its last value
    assert any("repeat a step" in w for w in log.metadata["warnings"])
    _, steps, _ = _read(p, step_key="order")
    assert steps == [1, 2, 3, 4, 5, 6]
    with pytest.raises(LogFormatError, match="no line prints a value labelled 'nope'"):
        read_log(p, loss_key="nope")


def test_two_runs_in_one_paste_are_two_segments(tmp_path):
    text = "".join(f"step {k} | loss {3 - k / 100}\n" for k in range(1, 11))
    text += "".join(f"step {k} | loss {2.9 - k / 100}\n" for k in range(5, 15))
    log, steps, _ = _read(_write(tmp_path, "two.log", text))
    assert len(log.segments) == 2 and steps[-1] == 14


def test_one_line_per_rank_keeps_rank_zero(tmp_path):
    text = "".join(f"[Rank {r}] step={k}, loss={3 - k / 10 + r}\n" for k in range(1, 5) for r in range(4))
    _, steps, loss = _read(_write(tmp_path, "ranks.log", text))
    assert steps == [1, 2, 3, 4] and loss[0] == pytest.approx(2.9)
    prefixed = "".join(f"[rank{r}]:step {k} loss {3 - k / 10 + r}\n" for k in range(1, 5) for r in range(2))
    _, steps, loss = _read(_write(tmp_path, "prefixed.log", prefixed))
    assert steps == [1, 2, 3, 4] and loss[-1] == pytest.approx(2.6)


def test_headerless_numbers_and_bare_tensor_prints(tmp_path):
    log, steps, loss = _read(_write(tmp_path, "pairs.txt", "76930 2.64\n76940 2.5\nSaving the model\n76950 nan\n"))
    assert steps == [76930, 76940, 76950] and np.isnan(loss[-1])
    assert any("only value" in w for w in log.metadata["warnings"])
    bare = "".join(f"tensor({v}, device='cuda:0')\n" for v in ("3.2", "3.1", "3.0", "nan"))
    _, steps, loss = _read(_write(tmp_path, "bare.txt", bare))
    assert steps == [1, 2, 3, 4] and np.isnan(loss[-1])


def test_crash_line_naming_nan_is_a_nonfinite_loss_at_its_step(tmp_path):
    text = "".join(f"step {k} | loss {3 - k / 100}\n" for k in range(1, 20))
    text += "Traceback (most recent call last):\nRuntimeError: Rank 0, iteration 25: Unexpected result nan " \
            "(message='found NaN in local forward loss calculation')\n"
    log, steps, loss = _read(_write(tmp_path, "crash.log", text))
    assert steps[-1] == 25 and np.isnan(loss[-1]) and np.isfinite(loss[:-1]).all()


def test_deepspeed_grad_norm_minus_one_is_nonfinite(tmp_path):
    text = "".join(f"step {k} | loss {3 - k / 100} | grad_norm {-1 if k == 3 else 1.5}\n" for k in range(1, 6))
    log, _, _ = _read(_write(tmp_path, "gn.log", text))
    assert np.isnan(log.series["grad_norm"].values[2]) and np.isfinite(log.series["grad_norm"].values[[0, 1, 3]]).all()


def test_deepspeed_engine_lines_do_not_hide_its_steps_lines(tmp_path):
    text = "".join(f"[2024-01-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step={k * 10}, skipped=0, "
                   f"lr=[0.0001], mom=[(0.9, 0.95)]\nsteps: {k * 10} loss: {3 - k / 10:.4f} iter time (s): 1.2 "
                   "samples/sec: 12.3\n" for k in range(1, 6))
    log, steps, loss = _read(_write(tmp_path, "ds.log", text))
    assert log.format == "text" and steps == [10, 20, 30, 40, 50] and loss[0] == pytest.approx(2.9)
    assert "iter_time" in log.series


def test_text_without_a_loss_names_its_most_frequent_line_and_the_flag(tmp_path):
    p = _write(tmp_path, "eval.log", "".join(f"round {k}: accuracy {0.5 + k / 100}, recall {0.4}\n" for k in range(9)))
    with pytest.raises(LossguardError) as err:
        read_log(p)
    assert "round 0: accuracy 0.5" in err.value.what and "--loss-key" in str(err.value)
    log = read_log(p, loss_key="accuracy")
    # "round" is no counter name it knows, but it counts up by one on every line: the step (a warning says so)
    assert log.live("loss")[0].tolist() == list(range(9))


def test_prose_is_not_claimed(tmp_path):
    p = _write(tmp_path, "essay.txt", "In 1999 there were 3 cats.\nChapter 2 begins.\nThe end, 42.\n" * 50)
    assert detect_format(p) is None


def test_megatron_bf16_log_past_long_startup_is_still_megatron_and_static_scale_is_no_collapse(tmp_path):
    from lossguard.analysis import analyze

    startup = "".join(f"  arg_{i} ........................................ {i}\n" for i in range(4000))
    lines = "".join(f" iteration {k * 10:8d}/    3000 | consumed samples: {k * 5120} | "
                    f"lm loss: {10 / (1 + k / 10):.6E} | loss scale: 1.0 | grad norm: 0.25 | "
                    "number of skipped iterations:   0 | number of nan iterations:   0 |\n"
                    for k in range(1, 80))
    p = _write(tmp_path, "mlm.log", "using world size: 16\n" + startup + lines)
    assert p.stat().st_size > 120_000
    log = read_log(p)
    assert log.format == "megatron"
    assert not analyze(log).of_kind("loss_scale_collapse")


def test_info_explain_and_keys_on_the_command_line(tmp_path):
    p = _write(tmp_path, "x.log", "".join(f"iter {k} | loss {3 - k / 10} | xent {2 - k / 10}\n" for k in range(1, 7)))
    run = subprocess.run([sys.executable, "-m", "lossguard", "info", "--explain", str(p)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "step: iter" in run.stdout and "loss: loss; other losses: xent" in run.stdout
    assert "iter 1 | loss 2.9 | xent 1.9" in run.stdout
    run = subprocess.run([sys.executable, "-m", "lossguard", "analyze", "--loss-key", "xent", "--step-key", "order",
                          str(p)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "Traceback" not in run.stderr


def test_static_loss_scale_is_no_collapse_but_a_falling_one_still_is():
    from lossguard.analysis import analyze
    from lossguard.runlog import RunLogBuilder

    def run(scale):
        b = RunLogBuilder("csv")
        b.start_segment("x")
        steps = np.arange(1, 201)
        b.add("loss", steps, 3 - steps / 1000)
        b.add("loss_scale", steps, scale)
        return analyze(b.build())

    assert not run(np.ones(200)).of_kind("loss_scale_collapse")  # bf16: "loss scale: 1.0" on every line
    falling = np.concatenate([np.full(100, 65536.0), 65536.0 / 2.0 ** np.arange(1, 101)]).clip(1.0)
    assert run(falling).of_kind("loss_scale_collapse")


def test_negative_csv_steps_are_read_with_a_warning(tmp_path):
    p = _write(tmp_path, "neg.csv", "step,loss\n-2,2.6\n-1,2.55\n0,2.5\n1,2.4\n")
    log = read_log(p)
    assert log.series["loss"].steps.tolist() == [-2, -1, 0, 1]
    assert any("2 row(s) have a negative 'step'" in w and "line 2" in w for w in log.metadata["warnings"])


def test_a_symlink_loop_is_a_clear_error(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    run = subprocess.run([sys.executable, "-m", "lossguard", "info", str(tmp_path / "loop")], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and "symbolic link that leads nowhere" in run.stderr and "Traceback" not in run.stderr
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "up").symlink_to(tmp_path)  # a directory loop inside a run directory
    (tmp_path / "run" / "log.csv").write_text("step,loss\n1,2.0\n2,1.9\n")
    run = subprocess.run([sys.executable, "-m", "lossguard", "info", str(tmp_path / "run")], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0 and "Traceback" not in run.stderr


def test_fast_path_reads_exactly_what_the_line_by_line_path_reads(tmp_path):
    """Blocks of hot lines (regex, numpy) and the lines between them give the points line-by-line gives."""
    from lossguard.io.text.lines import text_lines
    from lossguard.io.text import fast
    from lossguard.io.text.build import build
    from lossguard.io.text.choose import choose
    from lossguard.io.text.records import scan_lines

    rnd = np.random.default_rng(0)
    lines = ["booting...\n"]
    for s in range(1, 30001):
        lines.append(f"[rank0]: 2025-01-01 10:00:00,000 INFO {ESC}[31mstep: {s:5d}  {ESC}[32mloss: "
                     f"{3 + rnd.normal(0, 0.1):7.4f}  "
                     f"grad_norm: {'nan' if s == 777 else f'{rnd.random():.3f}'}{ESC}[39m\n")
        if s % 1000 == 0:
            lines.append(f"  eval at step {s}: val loss {2.5:.3f}\n")
        if s == 20000:
            lines.append("restarting from checkpoint\n")
            lines += [f"[rank0]: step: {k:5d}  loss: {3.1:7.4f}  grad_norm: 0.500\n" for k in range(19001, 19050)]
    p = _write(tmp_path, "big.log", "".join(lines))
    monkey_block = fast.BLOCK
    fast.BLOCK = 64 << 10  # many blocks, some cut between lines
    try:
        a = fast.scan_file(p)
    finally:
        fast.BLOCK = monkey_block
    b = scan_lines(text_lines(p))
    pa, pb = build(a, choose(a.tables)), build(b, choose(b.tables))
    assert sorted(pa.metrics) == sorted(pb.metrics) and pa.notes == pb.notes
    for k in pa.metrics:
        for x, y in zip(pa.metrics[k], pb.metrics[k], strict=True):
            assert np.array_equal(x, y, equal_nan=True), k
    assert len(pa.notes) == 2 and np.isnan(pa.metrics["grad_norm"][2][776])
