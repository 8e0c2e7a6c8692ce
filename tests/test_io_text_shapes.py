"""The text grammar on the general shapes of pasted logs: which template is the series (A), vector
losses (B), column tables (C), repr'd values (D), bare leading counters (E), two runs in one paste
(F) and short pastes (G). Every example is written here for the test, in the shape people paste."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lossguard.analysis import analyze
from lossguard.io import read_log


def _read(tmp_path: Path, text: str, name: str = "paste.txt"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    log = read_log(p)
    steps, values = log.live("loss")
    return log, steps.tolist(), values


def _kinds(log) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i in analyze(log).incidents:
        out.setdefault(i.kind.value, []).append(int(i.onset))
    return out


# --- A: the series is the template that repeats ---------------------------------------------------

def test_repeating_unlabelled_columns_beat_a_one_off_prose_label(tmp_path):
    rows = [f"{k * 50} {3.0 / (1 + k / 10):.4f}" for k in range(1, 31)] + [f"{k * 50} nan" for k in range(31, 36)]
    text = "I trained for a while and the loss went to nan after 1,500 steps\n" + "\n".join(rows) + "\n"
    log, steps, loss = _read(tmp_path, text)
    assert steps[0] == 50 and steps[-1] == 1750 and len(steps) == 35
    assert loss[0] == pytest.approx(3.0 / 1.1, abs=1e-4) and np.isnan(loss[-1])
    assert any("column #2" in w and "#1" in w for w in log.metadata["warnings"])
    assert "non_finite" in _kinds(log)


def test_one_label_in_several_templates_is_one_series(tmp_path):
    lines = []
    for k in range(40):
        v = "nan" if k >= 36 else f"{5.0 - k * 0.02:.3f}"
        glued = f"epoch-bar: {k * 2}%|##  | {k}/1000 [00:0{k % 10}<?, ?it/s]" if k % 8 == 0 else ""
        lines.append(f"{glued}train loss: {v}")
    log, steps, loss = _read(tmp_path, "\n".join(lines) + "\n")
    assert len(steps) == 40 and loss[0] == pytest.approx(5.0) and np.isnan(loss[-1])
    assert any("in order" in w for w in log.metadata["warnings"])


# --- C: column tables ------------------------------------------------------------------------------

def test_a_table_header_names_the_columns_and_may_repeat(tmp_path):
    head = "epoch     train_loss  valid_loss  error_rate  time"
    rows = [f"{e:<9} {1.5 - e * 0.1:<11.6f} {1.4 - e * 0.05:<11.6f} {0.3:<11.6f} 01:{e:02d}" for e in range(5)]
    more = [f"{e:<9} {'nan':<11} {'nan':<11} {0.9:<11.6f} 01:{e:02d}" for e in range(5, 8)]
    log, steps, loss = _read(tmp_path, "\n".join([head] + rows + [head] + more) + "\n")
    assert steps == list(range(8)) and loss[1] == pytest.approx(1.4) and np.isnan(loss[-1])
    assert log.metadata["text"]["loss"] == "train_loss" and log.metadata["text"]["step"] == "epoch"
    assert "non_finite" in _kinds(log)


def test_a_csv_header_and_csv_rows_without_a_header(tmp_path):
    with_head = "step,lr,loss,acc\n" + "".join(f"{s},0.001,{2.0 - s / 100:.3f},0.5\n" for s in range(10, 200, 10))
    log, steps, loss = _read(tmp_path, with_head, "h.txt")
    assert steps[0] == 10 and loss[0] == pytest.approx(1.9)
    bare = "".join(f"{e},{3.2 - (e - 40) * 0.1:.2f},{4.1:.2f},{7.7:.2f},24.0\n" for e in range(40, 52))
    bare += "".join(f"{e},nan,4.16,7.72,24.0\n" for e in range(52, 55))
    log, steps, loss = _read(tmp_path, bare, "b.txt")
    assert steps == list(range(40, 55)) and loss[0] == pytest.approx(3.2) and np.isnan(loss[-1])
    assert "non_finite" in _kinds(log)


def test_prose_of_two_words_is_no_table_header(tmp_path):
    text = "Results below\n" + "".join(f"{s} {1 / s:.5f}\n" for s in range(1, 20))
    log, steps, loss = _read(tmp_path, text)
    assert steps[:2] == [1, 2] and loss[1] == pytest.approx(0.5)


# --- E: a leading counter and a lone float, no labels -----------------------------------------------

def test_leading_counter_percent_time_then_the_loss(tmp_path):
    words = ["Abel / English", "Kato / Japanese", "Nowak / Polish"]
    lines = [f"{k * 1000} {k}% ({k // 60}m {k % 60}s) {'nan' if k > 15 else f'{2.9 - k * 0.05:.4f}'} "
             f"{words[k % 3]} {'✓' if k % 2 else '✗ (English)'}" for k in range(1, 21)]
    log, steps, loss = _read(tmp_path, "\n".join(lines) + "\n")
    assert steps[0] == 1000 and steps[-1] == 20000 and len(steps) == 20
    assert loss[0] == pytest.approx(2.85) and np.isnan(loss[-1])
    assert _kinds(log).get("non_finite") == [16000]


# --- F: two runs in one paste ----------------------------------------------------------------------

def test_a_second_run_from_the_first_step_keeps_the_first_runs_nan(tmp_path):
    first = [f"step {s} loss {'nan' if s >= 20 else f'{3 - s * 0.05:.3f}'}" for s in range(1, 25)]
    second = [f"step {s} loss {3 - s * 0.04:.3f}" for s in range(1, 31)]
    text = "\n".join(first + ["", "Tried again with a lower learning rate:"] + second) + "\n"
    log, steps, loss = _read(tmp_path, text)
    assert len(steps) == 54 and steps[:24] == list(range(1, 25)) and steps[24] == 25
    assert all(g.kind != "rollback" for g in log.segments) and len(log.segments) == 2
    assert any("new run" in w and "+24" in w for w in log.metadata["warnings"])
    assert _kinds(log).get("non_finite") == [20]


def test_a_restart_inside_the_range_stays_a_rollback(tmp_path):
    text = "".join(f"step {s} loss {3 - s * 0.01:.3f}\n" for s in range(1, 41))
    text += "".join(f"step {s} loss {3 - s * 0.011:.3f}\n" for s in range(30, 61))
    log, steps, loss = _read(tmp_path, text)
    assert steps == list(range(1, 61)) and loss[35] == pytest.approx(3 - 36 * 0.011)
    assert [g.kind for g in log.segments] == ["start", "rollback"]
    assert not any("new run" in w for w in log.metadata.get("warnings", []))


# --- B: vector losses ------------------------------------------------------------------------------

def test_a_loss_printed_as_an_array_is_its_mean_and_nan_when_any_element_is(tmp_path):
    lines = []
    for s in range(1, 21):
        a = [8.0 - s * 0.1 + k * 0.01 for k in range(8)]
        if s >= 17:
            a[5] = float("nan")
        items = [f"{x:.4f}" for x in a]
        lines.append(f"iteration {s}: loss [{' '.join(items[:5])}\n {' '.join(items[5:])}]  lr 0.001")  # numpy wraps
    log, steps, loss = _read(tmp_path, "\n".join(lines) + "\n")
    assert steps == list(range(1, 21)) and loss[0] == pytest.approx(7.935, abs=1e-6)
    assert np.isnan(loss[16]) and np.isfinite(loss[15])
    assert any("arrays" in w and "mean" in w for w in log.metadata["warnings"])
    assert _kinds(log).get("non_finite") == [17]
    assert "lr" in log.series


def test_a_summarised_numpy_print_is_the_mean_of_the_elements_shown(tmp_path):
    text = "".join(f"epoch {e} loss [{2 + e:.2f} {3 + e:.2f} ... {4 + e:.2f} {'nan' if e == 9 else f'{5 + e:.2f}'}]\n"
                   for e in range(10))
    _, steps, loss = _read(tmp_path, text)
    assert steps == list(range(10)) and loss[0] == pytest.approx(3.5) and np.isnan(loss[-1])


def test_an_unclosed_bracket_does_not_swallow_the_log(tmp_path):
    text = "config: milestones=[30, 60,\n" + "".join(f"step {s} loss {2 - s / 100:.3f}\n" for s in range(1, 30))
    _, steps, loss = _read(tmp_path, text)
    assert steps == list(range(1, 30))


# --- D: repr'd values ------------------------------------------------------------------------------

@pytest.mark.parametrize("wrap", ["Array({v}, dtype=float32)", "DeviceArray({v}, dtype=float32)", "np.float32({v})",
                                  "tensor({v}, device='cuda:0', grad_fn=<NllLossBackward0>)",
                                  "tf.Tensor({v}, shape=(), dtype=float32)"])
def test_values_in_the_reprs_of_tensor_libraries(tmp_path, wrap):
    vals = [f"{9 - s * 0.1:.4f}" for s in range(1, 15)] + ["nan"] * 3
    text = "".join(f"step {s * 10}: {{'loss': {wrap.format(v=v)}, 'lr': {wrap.format(v='0.001')}}}\n"
                   for s, v in enumerate(vals, 1))
    log, steps, loss = _read(tmp_path, text)
    assert steps[0] == 10 and len(steps) == 17 and loss[0] == pytest.approx(8.9) and np.isnan(loss[-1])
    assert log.metadata["text"]["loss"] == "loss"


def test_a_pretty_printed_dict_one_key_per_line(tmp_path):
    blocks = []
    for s in range(1, 16):
        v = "nan" if s > 12 else f"{6 - s * 0.1:.3f}"
        blocks.append(f"{{'learning_rate': Array(0.001, dtype=float32),\n 'loss': Array({v}, dtype=float32),\n"
                      f" 'step': {s * 100}}}")
    log, steps, loss = _read(tmp_path, "Metrics:\n" + "\n".join(blocks) + "\n")
    assert steps == [s * 100 for s in range(1, 16)] and loss[0] == pytest.approx(5.9) and np.isnan(loss[-1])
    assert _kinds(log).get("non_finite") == [1300]


# --- G: short pastes -------------------------------------------------------------------------------

def _short(tmp_path: Path, values, name: str):
    text = "".join(f"Epoch {i}/{len(values)}\n100/100 [======] - 3s - loss: {v}\n"
                   for i, v in enumerate(values, 1))
    log, _, _ = _read(tmp_path, text, name)
    alarms = [i for i in analyze(log).incidents if str(getattr(i.severity, "value", i.severity)) != "info"]
    return {(i.kind.value, int(i.onset)) for i in alarms}


@pytest.mark.parametrize("values, kind, step", [
    ([2.2, 1.9, 1.70, 11.46, 11.5, 11.47, 11.49, 11.46, 11.48, 11.5, 11.47], "spike_no_recovery", 4),
    ([1.70, 11.46, 11.46, 11.47, 11.46, 11.46, 11.46, 11.46, 11.46], "spike_no_recovery", 2),
    ([2.3, 2.2, 2.1, 2.0, 1.9, "nan"], "non_finite", 6),
    ([0.69, 0.69, 0.69, 0.69, 0.69, 0.69, "nan", "nan"], "non_finite", 7),
    ([2.0, 1.9, 1.95, 2.3, 2.9, 3.8, 5.0, 7.0], "divergence", 2),
])
def test_short_pastes_report_their_event(tmp_path, values, kind, step):
    assert (kind, step) in _short(tmp_path, values, "event.txt")


@pytest.mark.parametrize("values", [
    [5.2, 4.1, 3.6, 3.3, 3.1, 3.0, 2.95, 2.9],
    [5.2, 4.1, 3.6, 3.7, 3.3, 3.4, 3.1, 3.0],
    [2.3, 2.5, 2.2, 2.4, 2.1, 2.3, 2.0],
    [0.693, 0.69, 0.688, 0.69, 0.687, 0.689],
    [1.2, 0.8, 0.6, 0.5, 0.45, 0.42, 0.40, 0.39, 0.38, 0.38, 0.37, 0.37, 0.36, 0.36, 0.35],
])
def test_healthy_short_pastes_raise_no_alarm(tmp_path, values):
    assert _short(tmp_path, values, "healthy.txt") == set()


def test_a_header_names_the_leading_cells_of_rows_that_end_in_a_bar(tmp_path):
    lines = []
    for e in range(1, 4):
        lines.append("     Epoch   gpu_mem   box_loss   obj_loss  Instances")
        for b in range(1, 11):
            v = 9.0 / (1 + (e - 1) * 10 + b)
            lines.append(f"     {e}/3     2.1G    {v:8.4g}     0.5123        {16 + b}:  {b * 10}%|###   | {b}/10 "
                         f"[00:0{b % 10}<00:10,  5.1it/s]")
    log, steps, loss = _read(tmp_path, "\n".join(lines) + "\n")
    assert log.metadata["text"]["loss"] == "box_loss" and steps[:2] == [1, 2] and steps[-1] == 30
    assert loss[0] == pytest.approx(4.5, rel=1e-3)
    assert "obj_loss" in log.metadata["text"]["other_losses"]


# --- round-2 corpus gaps, general rules ------------------------------------------------------------

def test_a_bracket_of_labelled_values_takes_the_outer_label(tmp_path):
    lines = [f"Epoch: [{e}]  [{b:>3}/200]  lr: 0.0001  mask_loss: [local: {0.9 - (e * 200 + b) / 2000:.4f} | "
             f"reduced: 0.7000]  time: 0.48" for e in range(2) for b in range(0, 200, 20)]
    log, steps, loss = _read(tmp_path, "\n".join(lines) + "\n")
    assert log.metadata["text"]["loss"] == "mask_loss" and steps[:2] == [0, 20] and steps[-1] == 380
    assert loss[1] == pytest.approx(0.89)


def test_epoch_counters_count_from_the_first_epoch_in_view_in_both_readers(tmp_path):
    from lossguard.io import text

    lines = [f"2024/01/02 10:00:0{b % 10} - mmengine - INFO - Epoch(train) [{e}][{b}/300]  lr: 1.0e-04  "
             f"eta: 1 day, 2:03:04  time: 0.5  loss: {0.5 - b / 10000:.4f}" for e in (52, 53) for b in (100, 200, 300)]
    path = tmp_path / "mm.txt"
    path.write_text("\n".join(lines) + "\n")
    want = [100, 200, 300, 400, 500, 600]
    assert read_log(path).live("loss")[0].tolist() == want  # the known-tool reader that claims it
    assert text.read(path).live("loss")[0].tolist() == want  # the grammar


def test_a_bar_cut_short_is_not_glued_to_the_lines_after_it(tmp_path):
    text = "Epoch 0:  45%|####5     | 450/1000 [00:12<00:15, 36.5it/s, loss=2.34\n"
    text += "".join(f"  step {s} loss {2 - s / 100:.3f}\n" for s in range(1, 30))
    _, steps, _ = _read(tmp_path, text)
    assert steps == list(range(1, 30))


def test_a_stop_line_without_a_step_is_a_nan_at_the_next_step_of_epoch_batches(tmp_path):
    lines = [f"Epoch: [{e}]  [{b:>3}/100]  lr: 0.001  loss: {3 - (e * 100 + b) / 1000:.4f} (3.0)"
             for e in range(2) for b in range(0, 100, 10)]
    log, steps, loss = _read(tmp_path, "\n".join(lines + ["Loss is nan, stopping training"]) + "\n")
    assert steps[-2:] == [190, 200] and np.isnan(loss[-1]) and np.all(np.isfinite(loss[:-1]))


def test_a_counter_glued_to_its_number_by_an_underscore(tmp_path):
    text = "".join(f"iter_{s}:\tloss_{-3 - s / 1000:.6f}\n" for s in range(100, 400, 20))
    _, steps, loss = _read(tmp_path, text)
    assert steps[0] == 100 and steps[-1] == 380 and loss[0] == pytest.approx(-3.1)


def test_leading_counters_joined_by_pipes_the_one_counting_up_is_the_step(tmp_path):
    lines = []
    step = 0
    for epoch in (1, 2, 3):
        for b in range(1, 41):
            step += 1
            lines.append(f"\r{epoch}|{step}|Loss: {5 - step / 100:.4f}:  {b * 2}%|#  | {b}/40 [00:01<00:10, 2.1it/s]")
    log, steps, loss = _read(tmp_path, "".join(lines) + "\n")
    assert steps == list(range(1, 121)) and loss[0] == pytest.approx(4.99)
    assert log.metadata["text"]["step"] == "#2"


def test_transformers_5_dicts_of_quoted_numbers(tmp_path):
    head = "TrainingArguments(output_dir='out', logging_steps=5, learning_rate=2e-05)\n"
    rows = "".join(f"{{'loss': '{'nan' if k > 8 else f'{3 - k / 10:.4g}'}', 'grad_norm': '1.2', "
                   f"'learning_rate': '1.9e-05', 'epoch': '{k / 100:.4g}'}}\n" for k in range(1, 11))
    log, steps, loss = _read(tmp_path, head + rows)
    assert steps == list(range(5, 55, 5)) and loss[0] == pytest.approx(2.9) and np.isnan(loss[-1])


def test_bare_number_rows_beat_a_one_off_label_even_under_more_frequent_bars(tmp_path):
    lines = ["After a while the loss became nan, see below"]
    for k in range(1, 25):
        lines += [f"  {p}%|##   | {p}/100 [00:01<00:10]" for p in (10, 50, 90)]
        lines.append(f"{k * 1000} {'nan' if k > 20 else f'{2 / k:.4f}'}")
    log, steps, loss = _read(tmp_path, "\n".join(lines) + "\n")
    assert steps[:2] == [1000, 2000] and len(steps) == 24 and np.isnan(loss[-1])


def test_a_keras_paste_of_two_fits_keeps_the_first_fits_nan(tmp_path):
    def fit(nan_from):
        out = []
        for e in range(1, 11):
            v = "nan" if e >= nan_from else f"{2 - e * 0.1:.4f}"
            out += [f"Epoch {e}/10", f"100/100 [==============================] - 2s 20ms/step - loss: {v}"]
        return out
    text = "\n".join(fit(7) + ["Then with a lower learning rate:"] + fit(99)) + "\n"
    log, steps, loss = _read(tmp_path, text)
    assert steps == list(range(1, 21)) and np.isnan(loss[6]) and np.isfinite(loss[-1])
    assert _kinds(log).get("non_finite") == [7]
