"""The text grammar on shapes the round-6 held-out set showed as failure classes. Every example is
written here for the test, in the shape a trainer prints it (not copied from the held-out files)."""
from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from lossguard.analysis import analyze
from lossguard.errors import LossguardError
from lossguard.io import read_log
from lossguard.io.text.lines import MAX_LINE, text_lines


def _write(tmp_path: Path, text: str, name: str = "train.log") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _bar(n: int, total: int, post: str = "") -> str:
    """One tqdm redraw with a 10-cell bar (the values of the meter do not matter here)."""
    full = 10 * n // total
    meter = f"{n}/{total} [00:{n % 60:02d}<00:10,  2.00it/s{post}]"
    return f"Train: {100 * n // total:3d}%|{'#' * full}{' ' * (10 - full)}| {meter}"


def _captured_bar(total: int, loss, every_write: int = 0) -> str:
    """What a tqdm bar leaves in a file: every redraw after a ``\\r`` on one physical line; a message
    from ``tqdm.write`` clears the bar, ends the line, and the bar goes on on the next one."""
    out = ["\r" + _bar(0, total)]
    for n in range(1, total + 1):
        out.append("\r" + _bar(n, total, f", loss={loss(n)}"))
        if every_write and n % every_write == 0:
            out.append("\r" + " " * 60 + f"\rsaved checkpoint-{n} to disk\n")
    return "".join(out) + "\n"


def test_a_bar_line_longer_than_any_kept_line_is_read_in_pieces(tmp_path):
    """A run of 3,000 redraws on one physical line (~270 KB) is far over MAX_LINE: each redraw is read."""
    text = "start-up line\n" + _captured_bar(3000, lambda n: f"{2.0 + 1.0 / n:.4f}")
    assert max(len(line) for line in text.split("\n")) > 3 * MAX_LINE
    path = _write(tmp_path, text)
    log = read_log(path)
    steps, values = log.live("loss")
    assert len(steps) == 3000 and steps[0] == 1 and steps[-1] == 3000
    assert math.isclose(values[-1], 2.0 + 1.0 / 3000, rel_tol=1e-3)
    # the line reader (pastes, sniffing) splits the same way, and keeps one line number for all redraws
    pieces = [(n, t) for n, t in text_lines(path) if "loss=" in t]
    assert len(pieces) == 3000 and {n for n, _ in pieces} == {2}


def test_a_piece_without_any_separator_longer_than_a_block_is_skipped(tmp_path):
    """Junk with neither ``\\n`` nor ``\\r`` for longer than a block is dropped as it streams by; the
    lines around it are read."""
    junk = "x" * (5 << 20)
    lines = [f"step {s} loss {3.0 - s / 100:.3f}" for s in range(1, 40)]
    path = _write(tmp_path, "\n".join(lines[:20] + [junk] + lines[20:]) + "\n")
    assert not any(len(t) > MAX_LINE for _, t in text_lines(path))
    steps, _ = read_log(path).live("loss")
    assert len(steps) == 39


def test_a_message_between_redraws_inherits_the_current_count_not_the_first_bare_draw(tmp_path):
    """tqdm.write() between redraws: the message line must not take the count of the bar's first, bare
    draw (``0/N``, a header) - that reads as a restart to step 0 and supersedes the whole run."""
    rng = random.Random(6)
    def loss(n: int) -> str:
        return f"{(3.0 * math.exp(-n / 400) + 0.5) * (1 + rng.gauss(0, 0.02)):.4f}"

    text = _captured_bar(1200, loss, every_write=300)
    log = read_log(_write(tmp_path, text))
    steps, values = log.live("loss")
    assert len(steps) == 1200 and steps[0] == 1 and steps[-1] == 1200
    assert all(b > a for a, b in zip(steps, steps[1:], strict=False))
    assert len(log.segments) == 1
    assert not [i for i in analyze(log).incidents if i.severity.value in ("warning", "critical")]


def _fixed_width(rows: list[dict], names: list[str], *, right: bool) -> str:
    """A table padded to fixed widths, header once; a cell missing from a row prints as blanks."""
    widths = [max(10, len(n)) for n in names]
    head = "  ".join(f"{n:>{w}}" if right else f"{n:<{w}}" for n, w in zip(names, widths, strict=True))
    out = [head]
    for row in rows:
        cells = []
        for n, w in zip(names, widths, strict=True):
            v = row.get(n)
            text = "" if v is None else f"{v:g}"
            cells.append(f"{text:>{w}}" if right else f"{text:<{w}}")
        out.append("  ".join(cells))
    return "\n".join(out) + "\n"


def _table_rows(n: int, every: int, epoch_len: int) -> list[dict]:
    rng = random.Random(7)
    rows = []
    for j in range(1, n + 1):
        it = j * every
        loss = (60 + 150 * math.exp(-j / 20)) * (1 + rng.gauss(0, 0.03))
        row = {"epoch": it // epoch_len, "iteration": it, "main/loss": round(loss, 3),
               "main/acc": round(0.3 + j / 400, 4)}
        if (it - every) // epoch_len < it // epoch_len:  # an evaluation ran in this interval
            row["validation/main/loss"] = round(loss * 0.8, 3)
        rows.append(row)
    return rows


def test_a_fixed_width_table_with_blank_cells_is_read_by_position_left_aligned(tmp_path):
    """Rows that leave the validation cells blank (most of them) are read under the right names."""
    names = ["epoch", "iteration", "main/loss", "validation/main/loss", "main/acc", "elapsed_time"]
    rows = _table_rows(90, 100, 1000)
    log = read_log(_write(tmp_path, _fixed_width(rows, names, right=False)))
    steps, values = log.live("loss")
    assert len(steps) == 90 and steps[0] == 100 and steps[-1] == 9000
    assert math.isclose(values[0], rows[0]["main/loss"], rel_tol=1e-9)
    vsteps, _ = log.live("validation/main/loss")
    assert list(vsteps) == [r["iteration"] for r in rows if "validation/main/loss" in r]
    accs = log.live("main/acc")[1]
    assert len(accs) == 90 and math.isclose(accs[-1], rows[-1]["main/acc"])


def test_a_fixed_width_table_with_blank_cells_is_read_by_position_right_aligned(tmp_path):
    names = ["epoch", "iteration", "main/loss", "validation/main/loss", "main/acc"]
    rows = _table_rows(60, 50, 700)
    log = read_log(_write(tmp_path, _fixed_width(rows, names, right=True)))
    steps, values = log.live("loss")
    assert len(steps) == 60 and steps[-1] == 3000
    assert math.isclose(values[-1], rows[-1]["main/loss"], rel_tol=1e-9)
    assert len(log.live("validation/main/loss")[0]) == sum("validation/main/loss" in r for r in rows)


def test_a_percentage_in_a_table_of_numbers_is_progress_not_the_step(tmp_path):
    """``[ 10% ]  1  0.6931 ...``: the epoch column counts the records, not the percent before it."""
    rows = [f"[ {10 * e:3d}%      ]  {e:4d}  {0.69 * math.exp(-e / 8):18.6f}  {0.7 * math.exp(-e / 9):18.6f}"
            f"  {0.5 + e / 40:18.6f}  {11 + e / 10:10.2f}" for e in range(1, 11)]
    head = "[------------] Epoch      Train log_loss       Test log_loss            Test AUC     Time cost (sec)"
    log = read_log(_write(tmp_path, head + "\n" + "\n".join(rows) + "\n"))
    steps, values = log.live("loss")
    assert list(steps) == list(range(1, 11))
    assert math.isclose(values[0], round(0.69 * math.exp(-1 / 8), 6), rel_tol=1e-6)


def test_a_bar_description_does_not_make_the_bar_percentage_a_metric(tmp_path):
    """``Steps:  45%|####5     | 450/1000 [...]``: "Steps" describes the bar; 45 is no metric, and the run
    starts at the first drawn count that carries a loss."""
    text = _captured_bar(400, lambda n: f"{2.0 + 1.0 / n:.4f}").replace("Train:", "Steps:")
    log = read_log(_write(tmp_path, text))
    assert not [m for m in log.metrics if m.lower() == "steps"]
    assert log.live("loss")[0][0] == 1
    assert min(int(log.live(m)[0][0]) for m in log.metrics if len(log.live(m)[0])) == 1


def _box(kv: dict[str, object], *, tags: bool) -> str:
    """A dashed key/value box (one record), grouped under ``tag/`` rows when ``tags``."""
    rows: list[tuple[str, str]] = []
    tag = None
    for key, value in sorted(kv.items()):
        text = f"{value:<8.3g}" if isinstance(value, float) else str(value)
        if tags and "/" in key:
            head = key[: key.index("/") + 1]
            if head != tag:
                rows.append((head, ""))
                tag = head
            key = "   " + key[len(head):]
        rows.append((key, text))
    kw, vw = max(len(k) for k, _ in rows), max(len(v) for _, v in rows)
    rule = "-" * (kw + vw + 7)
    return "\n".join([rule] + [f"| {k:<{kw}} | {v:<{vw}} |" for k, v in rows] + [rule]) + "\n"


def test_vertical_key_value_boxes_are_one_record_each_grouped_by_tag(tmp_path):
    """SB3's layout: tag rows, indented members; the first box has no train/ section."""
    rng = random.Random(8)
    text, want = "Using cpu device\n", []
    for it in range(1, 61):
        kv: dict[str, object] = {"rollout/ep_rew_mean": -100.0 + it, "time/iterations": it,
                                 "time/total_timesteps": 2048 * it}
        if it > 1:
            loss = round((40 * math.exp(-it / 20) + 5) * (1 + rng.gauss(0, 0.05)), 1)
            kv.update({"train/loss": loss, "train/value_loss": 2 * loss, "train/n_updates": 10 * (it - 1)})
            want.append((2048 * it, loss))
        text += _box(kv, tags=True)
    log = read_log(_write(tmp_path, text))
    steps, values = log.live("loss")
    assert [int(s) for s in steps] == [s for s, _ in want]
    assert [float(f"{v:.3g}") for _, v in want] == list(values)
    assert log.metadata["text"]["step"] == "time/total_timesteps"


def test_flat_key_value_boxes_and_rules_that_open_no_box(tmp_path):
    """baselines' flat boxes (no tags) between other lines; a dashed rule before prose is no box."""
    text = "-" * 40 + "\nLogging to /tmp/run\n"
    for u in range(1, 31):
        text += _box({"nupdates": u, "policy_loss": -0.01 * u / 30, "value_loss": 3.0 / u + 0.2,
                      "loss": round(2.0 / u + 0.5, 3), "serial_timesteps": 128 * u}, tags=False)
    log = read_log(_write(tmp_path, text))
    steps, values = log.live("loss")
    assert len(steps) == 30 and steps[0] == 1 and steps[-1] == 30
    assert math.isclose(values[-1], round(2.0 / 30 + 0.5, 3), rel_tol=1e-3)


def test_a_named_counter_that_counts_up_by_a_constant_stride_is_the_step(tmp_path):
    """No label is a known counter name ("done: 100", in any language): a whole number that grows by the
    same amount on every loss line is the step, said in a warning; full-width colons separate labels."""
    rng = random.Random(9)
    lines = []
    for k in range(1, 21):
        lines.append(f"训练次数：{50 * k}, Loss：{(2.0 * math.exp(-k / 8) + 1.0) * (1 + rng.gauss(0, 0.02))}")
        if k % 10 == 0:
            lines.append(f"整体测试集上的Loss: {120.0 - k}")
    log = read_log(_write(tmp_path, "\n".join(lines) + "\n"))
    steps, _ = log.live("loss")
    assert list(steps) == [50 * k for k in range(1, 21)]
    assert any("counts up by the same amount" in w for w in log.metadata.get("warnings", []))
    assert log.metadata["text"]["step"] == "训练次数"  # the label without its full-width colon


def test_an_irregular_or_auxiliary_whole_number_is_not_taken_for_the_step(tmp_path):
    """A count that does not grow by a constant stride (tokens seen), or names a time, stays a value."""
    lines = [f"tokens: {1000 * k + (k * k) % 7}, elapsed: {3 * k}, loss: {3.0 - k / 50:.3f}" for k in range(1, 21)]
    log = read_log(_write(tmp_path, "\n".join(lines) + "\n"))
    assert list(log.live("loss")[0]) == list(range(1, 21))  # numbered in order


def test_several_named_values_none_a_loss_the_first_non_auxiliary_one_is_read(tmp_path):
    """A GAN's line: a counter, then time and data (auxiliary), then losses with no 'loss' in their
    names: the first of those is read (with a warning), so a NaN in them is seen."""
    lines = []
    for k in range(1, 13):
        v = "nan" if k >= 8 else f"{0.25 + 0.01 * (k % 3):.3f}"
        lines.append(f"(epoch: 1, iters: {100 * k}, time: 0.3{k % 10}, data: 0.001) D_A: {v} G_A: {v} cycle_A: {v}")
    log = read_log(_write(tmp_path, "\n".join(lines) + "\n"))
    steps, values = log.live("loss")
    assert log.metadata["text"]["loss"] == "D_A" and list(steps) == [100 * k for k in range(1, 13)]
    assert sum(math.isnan(v) for v in values) == 5
    assert any(i.kind.value == "non_finite" and i.onset == 800 for i in analyze(log).incidents)


def test_a_bar_description_set_before_the_count_moves_pairs_each_value_with_its_own_count(tmp_path):
    """YOLOv5's shape: per epoch a header row, then a bar whose description (epoch, running mean) is set
    during batch i, drawn at count i, then again at i+1 when tqdm counts the batch. The value of count
    n is the first one drawn with n; count 0 carries none; an epoch's last mean is not replaced by the
    next epoch's first."""
    nb, epochs = 20, 3
    means: dict[int, float] = {}
    text = ""
    for ep in range(epochs):
        text += "\n" + "".join(f"{h:>11}" for h in ("Epoch", "GPU_mem", "box_loss", "Instances", "Size")) + "\n"
        draws = [f"\r  0%|          | 0/{nb} [00:00<?, ?it/s]"]
        m = 0.0
        for i in range(nb):
            m = (m * i + (0.1 - 0.001 * (ep * nb + i)) * (1 + 0.05 * ((i * 7) % 5 - 2))) / (i + 1)
            means[ep * nb + i + 1] = float(f"{m:.4g}")
            desc = f"{f'{ep}/{epochs - 1}':>11}{'3.1G':>11}{m:11.4g}{40:11d}{640:11d}"
            for count in (i, i + 1):
                draws.append(f"\r{desc}: {100 * count // nb:3d}%|#         | {count}/{nb} [00:01<00:01,  2.50it/s]")
        text += "".join(draws) + "\n"
    log = read_log(_write(tmp_path, text))
    steps, values = log.live("loss")
    assert list(steps) == list(range(1, epochs * nb + 1))
    assert [means[int(s)] for s in steps] == list(values)


def test_an_epoch_summary_line_beside_batch_lines_is_not_a_record(tmp_path):
    """``Epoch E Batch B Loss X`` every 50 batches, then ``Epoch E Loss M Accuracy A`` (the epoch's mean):
    only the batch lines are records; the summaries would put a mean between two epochs' batches."""
    lines, want = [], []
    for e in range(1, 7):
        for b in (0, 50, 100):
            v = round(4.0 * math.exp(-(3 * (e - 1) + b / 50) / 6) + 0.5, 4)
            lines.append(f"Epoch {e} Batch {b} Loss {v:.4f} Accuracy {0.1 * e:.4f}")
            want.append(v)
        lines.append(f"Epoch {e} Loss {want[-1] + 0.3:.4f} Accuracy {0.1 * e:.4f}")
        lines.append(f"Time taken for 1 epoch: {120 + e}.53 secs\n")
    log = read_log(_write(tmp_path, "\n".join(lines) + "\n"))
    assert list(log.live("loss")[1]) == want


def test_a_line_of_rewards_is_not_read_as_a_loss(tmp_path):
    """An RL print with a counter and episode statistics only (no loss): nothing is guessed, the error
    names the line; a reward that rises is no divergence."""
    lines = [f"episode {k}: reward {10 + 2.3 * k:.2f}, ep_len {100 + k}, epsilon {max(0.05, 1 - k / 50):.3f}"
             for k in range(1, 40)]
    with pytest.raises(LossguardError):
        read_log(_write(tmp_path, "\n".join(lines) + "\n"))
