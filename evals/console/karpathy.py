"""Single-file research trainers: nanoGPT, llm.c, modded-nanogpt (plain ``print``/``printf`` lines).

Formats taken from:
- github.com/karpathy/nanoGPT train.py @ 3adf61e154c3fe3fca428ad6bc3818b27a3b8291:
  ``iter {iter_num}: loss {lossf:.4f}, time {ms:.2f}ms, mfu {mfu:.2f}%`` every log_interval,
  ``step {iter_num}: train loss {:.4f}, val loss {:.4f}`` every eval_interval, ``saving checkpoint to {out_dir}``,
  start-up prints of train.py/model.py (``tokens per iteration will be: ...``, ``number of parameters: ...M``).
  mfu prints ``-100.00%`` for the first 5 iterations (running_mfu starts at -1.0).
- github.com/karpathy/llm.c train_gpt2.cu @ f1e2ace651495b74ae22d45d1723443fd00ecd3a: the ``| Parameter | Value |``
  table, ``step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms | %.1f%% bf16 MFU | %.0f tok/s``
  every step and ``val loss %f`` every val_loss_every.
- github.com/KellerJordan/modded-nanogpt records/track_1_short/2024-10-10_Muon/train_gpt2.py @
  f411b3d346aa52d3504324ca93c230fd84c6c07f: ``step:{step+1}/{N} train_loss:{:.4f} train_time:{:.0f}ms step_avg:{:.2f}ms``
  and ``step:{step}/{N} val_loss:{:.4f} ...``; the log begins with the script's own source between ``=`` rules.
"""

from __future__ import annotations

import math

from evals.console.curve import Event, EventKind
from evals.console.fixture import Run, Spec

NANOGPT = "github.com/karpathy/nanoGPT train.py (3adf61e154c3fe3fca428ad6bc3818b27a3b8291)"
LLMC = "github.com/karpathy/llm.c train_gpt2.cu (f1e2ace651495b74ae22d45d1723443fd00ecd3a)"
MODDED = ("github.com/KellerJordan/modded-nanogpt records/track_1_short/2024-10-10_Muon/train_gpt2.py "
          "(f411b3d346aa52d3504324ca93c230fd84c6c07f)")


def nanogpt(run: Run) -> str:
    """nanoGPT's train.py stdout (log_interval = spec.interval, eval every 25 logged points)."""
    out = [
        "Overriding config with config/train_gpt2.py:",
        "# config for training GPT-2 (124M) down to very nice loss of ~2.85 on 1 node of 8X A100 40GB",
        "wandb_log = False",
        "batch_size = 12",
        "block_size = 1024",
        "gradient_accumulation_steps = 5 * 8",
        f"max_iters = {run.total}",
        f"lr_decay_iters = {run.total}",
        "eval_interval = 1000",
        "eval_iters = 500",
        f"log_interval = {run.spec.interval}",
        "weight_decay = 1e-1",
        "tokens per iteration will be: 491,520",
        "Initializing a new model from scratch",
        "defaulting to vocab_size of GPT-2 to 50304 (50257 rounded up for efficiency)",
        "number of parameters: 123.69M",
        "num decayed parameter tensors: 50, with 124,354,560 parameters",
        "num non-decayed parameter tensors: 25, with 19,200 parameters",
        "using fused AdamW: True",
        "compiling the model... (takes a ~minute)",
        "step 0: train loss 10.9872, val loss 10.9901",
    ]
    mfu = -1.0
    for i in range(run.n):
        it = run.steps[i]
        loss = run.show(i, f"{run.loss[i]:.4f}")
        dt = 1000 * (1.0 + run.rng.uniform(-0.02, 0.02))
        if i >= 5:
            m = 0.38 * (1 + run.rng.gauss(0, 0.01))
            mfu = m if mfu == -1.0 else 0.9 * mfu + 0.1 * m
        out.append(f"iter {it}: loss {loss}, time {dt:.2f}ms, mfu {mfu * 100:.2f}%")
        if i % 25 == 24:
            v = run.loss[i]
            out.append(f"step {it}: train loss {v - 0.02:.4f}, val loss {v + 0.03:.4f}")
            if math.isfinite(v):
                out.append("saving checkpoint to out")
    return "\n".join(out) + "\n"


def llmc(run: Run) -> str:
    """llm.c's train_gpt2cu stdout (every step logged; val loss every 250 steps)."""
    rows = [("train data pattern", "dev/data/fineweb10B/fineweb_train_*.bin"),
            ("val data pattern", "dev/data/fineweb10B/fineweb_val_*.bin"),
            ("output log dir", "log124M"), ("checkpoint_every", "5000"), ("resume", "0"),
            ("micro batch size B", "64"), ("sequence length T", "1024"), ("total batch size", "524288"),
            ("LR scheduler", "cosine"), ("learning rate (LR)", "6.000000e-04"),
            ("warmup iterations", "700"), ("final LR fraction", "0.000000e+00"),
            ("weight decay", "1.000000e-01"), ("skip update lossz", "0.000000"),
            ("skip update gradz", "0.000000"), ("max_steps", str(run.total)),
            ("val_loss_every", "250"), ("val_max_steps", "20"), ("sample_every", "20000"),
            ("genT", "64"), ("overfit_single_batch", "0"), ("use_master_weights", "enabled"),
            ("gelu_fusion", "0"), ("recompute", "1")]
    rule = "+-----------------------+----------------------------------------------------+"
    out = ["Multi-GPU support is enabled. Using 8 processes", rule,
           "| Parameter             | Value                                              |", rule]
    out += [f"| {k:<21} | {v:<50} |" for k, v in rows]
    out += [rule, "| device                | NVIDIA H100 80GB HBM3                              |",
            "| peak TFlops           | 989.4                                              |",
            "| precision             | BF16                                               |", rule,
            "| num_parameters        | 124475904                                          |", rule,
            "allocating 237 MiB for parameter gradients",
            "allocating 474 MiB for AdamW optimizer state m",
            "allocating 474 MiB for AdamW optimizer state v",
            "allocating 474 MiB for master copy of params",
            "device memory usage: 23513 MiB / 81008 MiB",
            "memory per sequence: 288 MiB",
            " -> estimated maximum batch size: 198",
            "val loss 11.009205"]
    mean = run.loss[0]
    for i in range(run.n):
        step = run.steps[i]
        v = run.loss[i]
        z = 0.0 if not math.isfinite(v) else (v - mean) / 0.05
        if math.isfinite(v):
            mean = 0.9 * mean + 0.1 * v
        loss = run.show(i, f"{v:7.6f}")
        gn = run.gnorm(i)
        lr = run.lr(step, 6e-4)
        ms = 172.3 * (1 + run.rng.uniform(-0.01, 0.01))
        out.append(f"step {step:4d}/{run.total} | loss {loss} ({z:+.2f}z)| norm {gn:6.4f} ({0.0:+.2f}z)| "
                   f"lr {lr:.2e} | {ms:.2f} ms | {53.4 * 172.3 / ms:.1f}% bf16 MFU | {524288 / ms * 1000:.0f} tok/s")
        if step % 250 == 0:
            out.append(f"val loss {v + 0.04:f}")
        if not math.isfinite(v) and i > (run.nan_from() or 0) + 4:
            break
    return "\n".join(out) + "\n"


def modded(run: Run) -> str:
    """modded-nanogpt's log: its own source, nvidia-smi, then one line per step and val lines."""
    out = ["=" * 100, "import os", "import sys", "with open(sys.argv[0]) as f:", "    code = f.read() # read the code of this file ASAP, for logging",
           "import uuid", "import glob", "import time", "# ... (rest of train_gpt2.py) ...", "=" * 100,
           "Running pytorch 2.5.0.dev20240919+cu121 compiled for CUDA 12.1", "nvidia-smi:",
           "Thu Oct 10 21:04:49 2024       ",
           "+---------------------------------------------------------------------------------------+",
           "| NVIDIA-SMI 535.183.06             Driver Version: 535.183.06   CUDA Version: 12.2     |",
           "+---------------------------------------------------------------------------------------+",
           "", "=" * 100]
    total = run.total
    tt = 0.0
    out.append(f"step:0/{total} val_loss:10.8258 train_time:0ms step_avg:nanms")
    for i in range(run.n):
        s = run.steps[i]
        tt += 223.0 * (1 + run.rng.uniform(-0.01, 0.01))
        loss = run.show(i, f"{run.loss[i]:.4f}")
        avg = tt / max(1, s - 10) if s > 10 else float("nan")
        out.append(f"step:{s}/{total} train_loss:{loss} train_time:{tt:.0f}ms step_avg:{avg:.2f}ms")
        if s % 125 == 0:
            out.append(f"step:{s}/{total} val_loss:{run.loss[i] + 0.03:.4f} train_time:{tt:.0f}ms step_avg:{avg:.2f}ms")
    out.append("peak memory consumption: 37834 MiB")
    return "\n".join(out) + "\n"


FIXTURES = [
    Spec("nanogpt__healthy.log", "nanoGPT", NANOGPT, "iter", "loss", nanogpt, points=500, interval=10,
         seed=201, notes="'iter N: loss X, time ..' lines; mfu -100.00% for the first 5 logged iters; eval lines 'step N: train loss X, val loss Y' every 250 iters"),
    Spec("nanogpt__divergence.log", "nanoGPT", NANOGPT, "iter", "loss", nanogpt, points=400, interval=10,
         seed=202, events=(Event(EventKind.DIVERGENCE, 0.7),),
         notes="loss diverges to >2x from ~70% of the run; eval lines carry 'train loss' and 'val loss' labels too"),
    Spec("llmc__healthy.log", "llm.c", LLMC, "step", "loss", llmc, points=450, interval=1, first=1,
         seed=203, notes="'step    N/M | loss X (zz)| norm ...' every step; 'val loss X' every 250 steps; start-up parameter table"),
    Spec("llmc__spike.log", "llm.c", LLMC, "step", "loss", llmc, points=500, interval=1, first=1, seed=204,
         events=(Event(EventKind.SPIKE, 0.55),),
         notes="spike that recovers; z-score of the loss printed beside it"),
    Spec("modded_nanogpt__healthy.log", "modded-nanogpt", MODDED, "step", "train_loss", modded, points=1000,
         interval=1, first=1, seed=205,
         notes="'step:N/M train_loss:X train_time:..ms step_avg:..ms' every step, val_loss lines every 125 steps; step_avg:nanms in the first lines is no loss"),
    Spec("modded_nanogpt__level_shift.log", "modded-nanogpt", MODDED, "step", "train_loss", modded,
         points=1000, interval=1, first=1, seed=206, events=(Event(EventKind.LEVEL_SHIFT, 0.6),),
         notes="the train loss jumps ~1.2 nats and stays up"),
]
