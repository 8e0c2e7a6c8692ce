"""The text grammar on shapes the round-7 held-out set showed as failure classes. Every example is
written here for the test, in the shape a trainer prints it (not copied from the held-out files)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from lossguard.io import read_log


def _write(tmp_path: Path, text: str, name: str = "train.log") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# --- wrong loss: a rare evaluation series does not beat the frequent training one -------------------

def test_training_perplexity_every_n_steps_beats_an_evaluation_perplexity_every_ten_n(tmp_path):
    """Only perplexities are printed: the training ``ppl`` (every 50 steps) is the series read, not
    the ``valid: perplexity`` of the evaluation lines (every 500), whatever the labels' order."""
    lines = ["  valid: perplexity 9000.0, took 3s"]
    for s in range(50, 2001, 50):
        lines.append(f"  step {s} lr 0.5 ppl {800.0 / (1 + s / 100):.2f} tok/s 9.1K")
        if s % 500 == 0:
            lines.append(f"  valid: perplexity {900.0 / (1 + s / 100):.2f}, took 3s")
            lines.append(f"  holdout test: perplexity {950.0 / (1 + s / 100):.2f}, took 3s")
    log = read_log(_write(tmp_path, "\n".join(lines) + "\n"))
    steps, values = log.live("loss")
    assert len(steps) == 40 and steps[0] == 50 and steps[-1] == 2000
    assert math.isclose(values[0], math.log(800.0 / 1.5), rel_tol=1e-3)
    assert math.isclose(values[-1], math.log(800.0 / 21), rel_tol=1e-3)


# --- wrong step: the global update counter beside the epoch; a per-epoch "Iter b/N" -------------------

def test_a_global_update_counter_beside_the_epoch_numbers_the_line(tmp_path):
    """``epoch: E | nupdates: U | loss: X`` (one line per epoch): the global update count is the step
    (the rule: global step, else iteration, else epoch x batches + batch)."""
    lines = [f"epoch: {e:4d} | nupdates: {1000 * e + 7:8d} | lr: 0.1 | loss: {50.0 / e:9.4f} | n_updates_ok: 1"
             for e in range(1, 9)]
    steps, values = read_log(_write(tmp_path, "\n".join(lines) + "\n")).live("loss")
    assert list(steps) == [1000 * e + 7 for e in range(1, 9)]
    assert math.isclose(values[1], 25.0)
    lines = [f"ep={e} n_updates={400 * e} train_loss={9.0 / e:.3f}" for e in range(1, 6)]
    steps, _ = read_log(_write(tmp_path, "\n".join(lines) + "\n", "b.log")).live("loss")
    assert list(steps) == [400 * e for e in range(1, 6)]


def test_an_iteration_counter_that_restarts_each_epoch_with_its_total_is_epoch_times_batches(tmp_path):
    """``Epoch E | Iter b/N | loss X``: ``Iter`` starts again at each epoch, so it counts the batches of
    an epoch; the step is ``(E - first E) x N + b``, and every line keeps its own point."""
    lines = []
    for e in range(3, 6):
        for b in (25, 50, 75, 100):
            lines.append(f"Epoch {e} | Iter {b}/100 | lr 0.01 | loss {4.0 - e / 10 - b / 1000:.4f} |")
        lines.append(f"Valid loss: {3.5 - e / 10:.3f}")
    steps, values = read_log(_write(tmp_path, "\n".join(lines) + "\n")).live("loss")
    assert list(steps) == [(e - 3) * 100 + b for e in range(3, 6) for b in (25, 50, 75, 100)]
    assert math.isclose(values[-1], 4.0 - 0.5 - 0.1, rel_tol=1e-6)


# --- unread: "[ counters ] {dict}" reports with a metric named "rank" ----------------------------------

def test_bracketed_counters_then_a_dict_keep_every_report(tmp_path):
    """``[ time:Ts seen:N ] {'loss_mean': X, 'rank': 3.71, 'n_upd': u, 'total_train_updates': U}``:
    a fractional ``rank`` is a metric (a mean rank), not the process rank (whose lowest value would
    keep one report); the running total of updates numbers the reports, not the per-report count."""
    lines, total = [], 0
    for k, upd in enumerate((31, 29, 30, 28, 31, 30), start=1):
        total += upd
        lines.append(f"[ time:{12.5 * k:.1f}s seen:{640 * k} epochs:{0.01 * k:.2f} ] "
                     f"{{'seen': 640, 'loss_mean': {5.0 / k:.4g}, 'rank': {9.0 - k / 3:.4g}, "
                     f"'updates': {upd}, 'lr': 1e-05, 'total_train_updates': {total}}}")
    log = read_log(_write(tmp_path, "\n".join(lines) + "\n"))
    steps, values = log.live("loss")
    assert list(steps) == [31, 60, 90, 118, 149, 179]
    assert math.isclose(values[2], 5.0 / 3, rel_tol=1e-3)


def test_a_whole_numbered_rank_still_keeps_one_process(tmp_path):
    """Each line printed by two processes (``rank 0``, ``rank 1``): the lowest rank's lines are kept."""
    lines = [f"rank {r} step {s} loss {3.0 - s / 100 + r:.3f}" for s in range(1, 30) for r in (0, 1)]
    steps, values = read_log(_write(tmp_path, "\n".join(lines) + "\n")).live("loss")
    assert len(steps) == 29 and math.isclose(values[0], 2.99, rel_tol=1e-6)


# --- wrong step: a counter named by a header printed on two rows ----------------------------------------

def test_a_two_row_table_header_names_each_column_by_both_words(tmp_path):
    """``mean     recent   sample   sample`` over ``loss     window   counter  weight``: the columns are
    ``mean loss``, ``recent window``, ``sample counter`` (the step, doubling), ``sample weight``."""
    lines = ["options: passes = 1", "", "mean       recent       sample     sample",
             "loss       window       counter    weight"]
    n, mean = 2, 0.9
    while n <= 1024:
        lines.append(f"{mean:<10.6f} {mean * 0.8:<12.6f} {n:>7d} {float(n):>10.1f}")
        n, mean = n * 2, mean * 0.85
    lines += ["", "finished run", "average loss = 0.1234"]
    log = read_log(_write(tmp_path, "\n".join(lines) + "\n"))
    steps, values = log.live("loss")
    assert list(steps) == [2 ** k for k in range(1, 11)]
    assert math.isclose(values[0], 0.9, rel_tol=1e-6) and math.isclose(values[1], 0.9 * 0.85, rel_tol=1e-5)


def test_a_header_row_above_a_different_number_of_names_is_not_merged(tmp_path):
    """Two header-like lines whose words do not stand over each other are two lines, not one header:
    the last one names the columns."""
    lines = ["Training the model now", "step      loss      lr"]
    lines += [f"{s:<9d} {2.0 - s / 1000:<9.4f} 0.001" for s in range(10, 310, 10)]
    steps, values = read_log(_write(tmp_path, "\n".join(lines) + "\n")).live("loss")
    assert steps[0] == 10 and steps[-1] == 300 and math.isclose(values[0], 1.99)


def test_the_upper_header_row_tells_the_training_loss_from_the_evaluation_one(tmp_path):
    """``global  train   eval`` over ``step    loss    loss``: only the two rows together say which
    ``loss`` is the training one (the lower row alone names two columns ``loss``)."""
    lines = ["global     train      eval", "step       loss       loss"]
    lines += [f"{s:<10d} {3.0 - s / 1000:<10.4f} {9.0 - s / 1000:<10.4f}" for s in range(100, 2100, 100)]
    steps, values = read_log(_write(tmp_path, "\n".join(lines) + "\n")).live("loss")
    assert steps[0] == 100 and steps[-1] == 2000
    assert math.isclose(values[0], 2.9) and math.isclose(values[-1], 1.0)


# --- wrong loss: a step's own loss over the named parts printed on sub-lines before it ------------------

def _detector_log(steps: int, nan_at: int | None = None) -> str:
    """Per step: two head lines, each with a named ``total_loss`` (that head's part), then the step
    line ``N: X, Y avg loss, R rate, T seconds`` with the step's loss unnamed and its running mean."""
    out, avg = ["config: heads = 2, batch = 32"], None
    for s in range(1, steps + 1):
        loss = 40.0 / (1 + s / 10) + (s % 3) * 0.5
        if nan_at is not None and s >= nan_at:
            loss = float("nan")
        avg = loss if avg is None else 0.9 * avg + 0.1 * loss
        for head, share in (("A", 0.7), ("B", 0.3)):
            out.append(f"head {head} (scale 0.50): objects: {s % 7 + 1}, box_loss = {loss * share / 2:.6f}, "
                       f"total_loss = {loss * share:.6f}")
        out.append(f" {s}: {loss:.6f}, {avg:.6f} avg loss, 0.001000 rate, 1.25 seconds, {32 * s} images")
    return "\n".join(out) + "\n"


def test_the_step_line_loss_beats_a_part_named_total_loss_on_lines_printed_several_times_a_step(tmp_path):
    """The named ``total_loss`` of each head (two lines a step) is a part; the step line's first value,
    followed by its running mean ``avg loss``, is the step's loss, numbered by the step line's ``N:``."""
    log = read_log(_write(tmp_path, _detector_log(300)))
    steps, values = log.live("loss")
    assert steps[0] == 1 and steps[-1] == 300 and len(steps) == 300
    assert math.isclose(values[1], 40.0 / 1.2 + 1.0, rel_tol=1e-5)
    log = read_log(_write(tmp_path, _detector_log(300, nan_at=250), "nan.log"))
    steps, values = log.live("loss")
    assert steps[~np.isfinite(values)][0] == 250


def test_a_value_followed_by_its_loss_name_is_labelled_by_it(tmp_path):
    """``iter N: X mean loss, L lr``: the name after the number labels it (the counter's name may follow
    its number too: ``100 batches``)."""
    lines = [f"iter {s}: {5.0 - s / 100:.4f} mean loss, {0.1:.4f} lr" for s in range(1, 60)]
    steps, values = read_log(_write(tmp_path, "\n".join(lines) + "\n")).live("loss")
    assert steps[0] == 1 and steps[-1] == 59 and math.isclose(values[0], 4.99)
