"""Megatron-LM and Megatron-DeepSpeed stdout logs as launchers leave them: hundreds of KB of start-up
output (the argument dump, NCCL and DeepSpeed INFO lines) before the first iteration line.

Megatron cannot run here, so the logs are assembled from line formats copied from real runs'
stdout (``training_log`` in ``megatron/training/training.py``; DeepSpeed's engine ``step=`` line
printed while the engine initialises, before Megatron's ``training ...`` banner). Real logs had
123 KB and 393 KB of start-up output before the first iteration.
"""
from __future__ import annotations

import pytest

from lossguard.io import detect_format, megatron, read_log
from lossguard.metrics import LOSS, LR, VAL_LOSS


def _startup(kib: int) -> str:
    lines = ["using world size: 8, data-parallel size: 8, context-parallel size: 1, tensor-model-parallel size: 1",
             "------------------------ arguments ------------------------"]
    i, size = 0, 0
    while size < kib * 1024:
        lines.append(f"  argument_{i:05d} {'.' * 40} {i * 7 % 13}")
        lines.append(f"vm:1234:1234 [0] NCCL INFO Channel {i % 32:02d}/32 :    0   1   2   3   4   5   6   7")
        size += len(lines[-1]) + len(lines[-2]) + 2
        i += 1
    lines += ["-------------------- end of arguments ---------------------",
              "> building GPT2BPETokenizer tokenizer ...",
              "[after dataloaders are built] datetime: 2025-04-13 23:41:00 "]
    return "\n".join(lines) + "\n"


def _iteration(it: int, loss: float) -> str:
    return (f" [2025-04-13 23:41:{it % 60:02d}] iteration {it:>8}/    1000 | consumed samples: {it * 16:>12} | "
            f"elapsed time per iteration (ms): 820.7 | learning rate: 4.000000E-05 | global batch size:    16 | "
            f"lm loss: {loss:.6E} | loss scale: 4096.0 | grad norm: 2.357 | number of skipped iterations:   0 | "
            f"number of nan iterations:   0 |\n")


@pytest.mark.parametrize("kib", [123, 393, 3000])
def test_first_iteration_after_long_startup(tmp_path, kib):
    path = tmp_path / "train.log"
    body = "training ...\n[before the start of training step] datetime: 2025-04-13 23:41:00 \n"
    body += "".join(_iteration(it, 10.0 - it / 100) for it in range(10, 210, 10))
    body += " validation loss at iteration 100 | lm loss value: 7.398865E+00 | lm loss PPL: 1.634128E+03 | \n"
    path.write_text(_startup(kib) + body)
    assert path.read_bytes().index(b" iteration ") > 64 * 1024  # well past the head read_log sniffs
    assert detect_format(path) == "megatron"
    log = read_log(path)
    assert log.format == "megatron" and len(log.segments) == 1
    assert log.live(LOSS)[0].tolist() == list(range(10, 210, 10))
    assert log.live(VAL_LOSS)[0].tolist() == [100]


def test_deepspeed_step_zero_before_the_banner_is_not_a_resume(tmp_path):
    path = tmp_path / "train.log"
    text = _startup(100)
    text += "[2024-04-04 09:09:20,100] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.0\n"
    text += "[2024-04-04 09:09:25,100] [INFO] [logging.py:96:log_dist] [Rank 0] step=0, skipped=0, lr=[0.0], mom=[(0.9, 0.95)]\n"
    text += "training ...\n[before the start of training step] datetime: 2024-04-04 09:09:27\n"
    for it in range(10, 110, 10):
        text += (f"[2024-04-04 09:10:{it % 60:02d},100] [INFO] [logging.py:96:log_dist] [Rank 0] step={it}, "
                 f"skipped=0, lr=[{it * 1e-6:.6e}], mom=[(0.9, 0.95)]\n")
        text += _iteration(it, 5.0 - it / 100)
    path.write_text(text)
    log = read_log(path)
    assert log.format == "megatron"
    assert len(log.segments) == 1 and log.summary()["resumes"] == 0
    assert log.live(LOSS)[0].tolist() == list(range(10, 110, 10))
    assert log.live(LR)[0].tolist()[0] == 0  # the engine's step-0 state is kept, in the same launch


def test_plain_text_without_startup_is_not_scanned(tmp_path):
    """The scan past the head only runs on a launcher's start-up output: other text stays unread."""
    path = tmp_path / "notes.txt"
    path.write_text("just some notes\n" * 10000 + _iteration(10, 1.0))
    head = path.read_bytes()[:64 * 1024]
    assert not megatron.sniff(path, head)
