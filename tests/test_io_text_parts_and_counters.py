"""Two reader mechanisms of issue 18's closing round: a loss printed only as its parts and their
total (no label names a loss), and a bare whole number right after a leading ``[N]`` counter (epoch,
then iteration). Every example is written here in the shape a trainer prints it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lossguard.io import read_log


def _parts_log(tmp_path: Path, rows: int = 12, *, total=lambda parts: sum(parts)) -> Path:
    rng = np.random.default_rng(0)
    lines = []
    for k in range(rows):
        parts = [round(float(v), 3) for v in rng.uniform(0.5, 4.0, 4)]
        t = round(total(parts), 3)
        lines.append(f"[{k // 6:3d}]  {520 + 10 * k:6d} || B: {parts[0]:.3f} | C: {parts[1]:.3f} | "
                     f"M: {parts[2]:.3f} | S: {parts[3]:.3f} | T: {t:.3f} || ETA: 2 days, 4:31:22 || "
                     f"timer: {rng.uniform(1.2, 1.7):.3f}")
    p = tmp_path / "train.log"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_the_column_that_sums_the_others_is_the_loss_and_the_bare_counter_the_step(tmp_path):
    log = read_log(_parts_log(tmp_path))
    steps, values = log.live("loss")
    assert log.metadata["text"]["loss"] == "T"
    assert steps.tolist() == list(range(520, 640, 10))  # the bare iteration, not the epoch in brackets
    c = log.metadata["text"]
    assert any("sum of others" in w for w in log.metadata["warnings"]), c


def test_no_column_sums_the_others_then_the_first_value_is_read_as_before(tmp_path):
    # T is no sum here (parts times 1.5): the rule must not pick a column by chance
    log = read_log(_parts_log(tmp_path, total=lambda parts: 1.5 * sum(parts)))
    assert log.metadata["text"]["loss"] == "B"


@pytest.mark.parametrize("line, step", [
    ("[3] 1200 loss: {v:.4f}", 1200),     # epoch, then the iteration
    ("(3) 1200 | loss {v:.4f}", 1200),
])
def test_a_bare_count_after_a_leading_counter_is_the_step(tmp_path, line, step):
    text = "\n".join(line.replace("1200", str(step + 100 * k)).format(v=2.0 - 0.01 * k) for k in range(10))
    p = tmp_path / "t.log"
    p.write_text(text + "\n")
    steps, _ = read_log(p).live("loss")
    assert steps.tolist() == [step + 100 * k for k in range(10)]


def _keras_epochs(epochs: int, stop_at: int | None) -> str:
    """Keras 2's verbose=1 bar: each epoch's redraws joined by backspaces on one line, a redraw every
    5 batches of 100; with ``stop_at``, TerminateOnNaN's message (0-based batch) over the last
    redraw, then the bar finalised at its target with the NaN."""
    out = []
    for e in range(1, epochs + 1):
        out.append(f"Epoch {e}/{epochs}\n")
        draws = []
        for n in range(5, 101, 5):
            if stop_at is not None and e == epochs and n > stop_at:
                draws[-1] += f"Batch {stop_at}: Invalid loss, terminating training\n"
                draws.append("\n100/100 [==============================] - 2s 20ms/step - loss: nan")
                break
            bar = "=" * (n * 30 // 100)
            draws.append(f"{n:3d}/100 [{bar:30s}] - ETA: 1s - loss: {3.0 - 0.01 * (e * 20 + n // 5):.4f}")
        if stop_at is None or e < epochs:
            draws.append("100/100 [==============================] - 2s 20ms/step - loss: 2.0000")
        out.append(("\b" * 66 + "\r").join(draws) + "\n")
    return "".join(out)


def test_a_crash_message_over_the_last_redraw_is_the_nan_step_before_the_finalised_bar(tmp_path):
    p = tmp_path / "keras.log"
    p.write_text(_keras_epochs(3, stop_at=49))
    log = read_log(p)
    steps, values = log.live("loss")
    # epoch 3 starts at 200: the crash's batch 49 is step 249, the finalised "100/100" bar 300
    assert steps[-3:].tolist() == [245, 249, 300] and np.isnan(values[-2:]).all() and np.isfinite(values[-3])
    assert any("step 249" in w for w in log.metadata["warnings"])


def test_a_crash_message_followed_by_finite_losses_adds_no_point(tmp_path):
    p = tmp_path / "went_on.log"
    p.write_text("".join(f"step {k} loss {2.0 - 0.01 * k:.3f}\n" for k in range(1, 6))
                 + "warning: Invalid loss at step 6, stopping\n"
                 + "".join(f"step {k} loss {2.0 - 0.01 * k:.3f}\n" for k in range(7, 10)))
    steps, values = read_log(p).live("loss")
    assert 6 not in steps.tolist() and np.isfinite(values).all()


def _mnist(tmp_path: Path) -> Path:
    """PyTorch's MNIST example: ``[batch_idx * len(data)/len(dataset) (p%)]``, a sample count."""
    lines = [f"Train Epoch: {e} [{b * 64}/60000 ({100 * b * 64 / 60000:.0f}%)]\tLoss: {2.3 - 0.001 * (e * 938 + b):.6f}"
             for e in (1, 2) for b in range(0, 938, 10)]
    p = tmp_path / "mnist.log"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_a_sample_counter_is_read_in_samples_with_a_warning_naming_the_flag(tmp_path):
    log = read_log(_mnist(tmp_path))
    steps, _ = log.live("loss")
    assert steps[1] - steps[0] == 640
    assert any("may count samples" in w and "--step-key '/N'" in w for w in log.metadata["warnings"])


def test_the_flag_divides_the_sample_counter_into_steps(tmp_path):
    log = read_log(_mnist(tmp_path), step_key="/64")
    steps, _ = log.live("loss")
    assert steps[:3].tolist() == [0, 10, 20] and int(steps[94]) == 60000 // 64  # epoch 2 starts at 937
    assert not any("may count samples" in w for w in log.metadata["warnings"])


def test_a_batch_counter_gets_no_sample_warning(tmp_path):
    p = tmp_path / "batches.log"
    p.write_text("".join(f"Train Epoch: {e} [{b}/938]\tLoss: {2.3 - 0.001 * b:.4f}\n" for e in (1, 2)
                         for b in range(10, 939, 10)))
    assert not any("may count samples" in w for w in read_log(p).metadata.get("warnings") or [])


def test_a_constant_whole_valued_part_does_not_blur_the_sum(tmp_path):
    # "C: 2.000" on every line reads as the float 2.0: its printed digits are those of the others
    p = tmp_path / "const.log"
    p.write_text("".join(f"[{k // 5:3d}] {10 * k:6d} || B: {1 + k / 50:.3f} | C: 2.000 | T: {3 + k / 50:.3f} || "
                         f"timer: {1.3 + k / 100:.2f}\n" for k in range(1, 12)))
    assert read_log(p).metadata["text"]["loss"] == "T"


def _nemo_bar(tmp_path: Path, last: int) -> Path:
    """NeMo's MegatronProgressBar: the postfix (one update behind n) goes through tqdm's format_num
    ('{:.3g}' when shorter: global_step=10009.0 prints '1e+4'), then the closing refresh at the same n."""
    def num(x: float) -> str:
        f = f"{x:.3g}".replace("+0", "+").replace("-0", "-")
        return f if len(f) < len(str(x)) else str(x)
    parts = [f"\rEpoch 0:  50%|#####     | {n}/{last} [10:00<10:00, reduced_train_loss=2.500, "
             f"global_step={num(float(n - 11))}, consumed_samples={num(float(n * 256))}]" for n in range(9990, last + 1, 10)]
    parts.append(f"\rEpoch 0: 100%|##########| {last}/{last} [10:00<00:00, reduced_train_loss=2.400, "
                 f"global_step={num(float(last - 1))}, consumed_samples=3.0]")
    p = tmp_path / "nemo.log"
    p.write_text("".join(parts) + "\n")
    return p


def test_a_step_printed_with_three_significant_digits_is_restored_from_the_bar_count(tmp_path):
    steps, _ = read_log(_nemo_bar(tmp_path, 10300)).live("loss")
    # 10009 ... 10049 all print '1e+4'; n - 11 restores them; the closing refresh (10299 -> '1.03e+4'
    # is no shorter than '10299.0') is printed in full
    assert steps.tolist() == list(range(9979, 10290, 10)) + [10299]


def test_a_closing_refresh_whose_rounded_step_disagrees_with_the_bar_keeps_what_it_printed(tmp_path):
    steps, _ = read_log(_nemo_bar(tmp_path, 12000)).live("loss")
    assert steps[-1] == 12000 and steps[-2] == 11989  # 11999 prints '1.2e+4': not n - 11 (11989)
