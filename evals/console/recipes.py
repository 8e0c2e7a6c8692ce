"""PyTorch recipe repos: torchtune (tqdm description and DiskLogger file), HF accelerate example, picotron, lingua.

Formats taken from:
- github.com/pytorch/torchtune @ bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1: recipes/full_finetune_single_device.py
  (``tqdm(total=steps_per_epoch, desc=...)`` and ``pbar.set_description(f"{epoch + 1}|{global_step}|Loss: {loss:.4f}")``
  every step) and torchtune/training/metric_logging.py ``DiskLogger.log_dict`` (``Step {step} | `` then
  ``{name}:{data} `` per metric, raw ``str(float)``).
- github.com/huggingface/accelerate @ 16cb6eb80dd9aa8b4df1a63ef57863e455d53b83:
  examples/alst_ulysses_sequence_parallelism/sp-alst.py (``batch {iter}: seqlen: {n}`` then
  ``accelerator.print(f"{iter}: {loss=}")`` -> ``N: loss=tensor(2.3456, device='cuda:0', grad_fn=<DivBackward0>)``).
- github.com/huggingface/picotron @ 59714b1bf25541dbeb6f5a721ed15f6d0768e786: train.py (``[rank 0] Step: {step:<5d} | Loss:
  {loss:6.4f} | Global batch size: .. | Tokens/s: .. | ... | MFU: {:5.2f}% | Memory usage: {:6.2f}GB``) and
  picotron/utils.py ``to_readable_format``.
- github.com/facebookresearch/lingua @ 437d680e521873bb5971067148a69587790da853: apps/main/train.py (``step: {step}  acc:
  {acc_step}  loss: {round(loss, 4):>7}  grad: {:.2e}  flops: {:.2e}  wps: {:.2e}  iter: {:>7}  data: {:>5}  lr: {:.2e}
  mem: {:.0f}%  pow: {} W``) and lingua/logger.py ``LogFormatter`` (``{rank}: {level:<7} {%y-%m-%d %H:%M:%S.%f} -
  {elapsed} - ``).
"""

from __future__ import annotations

import math
from datetime import timedelta

from evals.console.curve import Event, EventKind
from evals.console.fixture import Clock, Run, Spec
from evals.console.text import tqdm_meter

TT = "github.com/pytorch/torchtune recipes/full_finetune_single_device.py (bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1)"
TTD = "github.com/pytorch/torchtune torchtune/training/metric_logging.py DiskLogger (bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1)"
ACC = "github.com/huggingface/accelerate examples/alst_ulysses_sequence_parallelism/sp-alst.py (16cb6eb80dd9aa8b4df1a63ef57863e455d53b83)"
PICO = "github.com/huggingface/picotron train.py (59714b1bf25541dbeb6f5a721ed15f6d0768e786)"
LINGUA = "github.com/facebookresearch/lingua apps/main/train.py + lingua/logger.py (437d680e521873bb5971067148a69587790da853)"


def readable(num: float, precision: int = 2) -> str:
    """picotron's ``to_readable_format``."""
    for div, suf in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if num >= div:
            return f"{num / div:.{precision}f}{suf}"
    return f"{num:.{precision}f}"


def torchtune_console(run: Run) -> str:
    """torchtune recipe stdout: the per-epoch tqdm bar whose *description* carries the loss."""
    per = 500
    head = ["INFO:torchtune.utils._logging:Running FullFinetuneRecipeSingleDevice with resolved config:", "", "batch_size: 4",
            "epochs: 3", f"log_every_n_steps: {run.spec.interval}", "", "INFO:torchtune.utils._logging:Model is initialized with precision torch.bfloat16.",
            "INFO:torchtune.utils._logging:Tokenizer is initialized from file.", "INFO:torchtune.utils._logging:Optimizer is initialized.",
            "INFO:torchtune.utils._logging:Loss is initialized.", "INFO:torchtune.utils._logging:Dataset and Sampler are initialized.",
            "INFO:torchtune.utils._logging:Learning rate scheduler is initialized.",
            "WARNING:torchtune.utils._logging: Profiling disabled.",
            "INFO:torchtune.utils._logging: Profiler config after instantiation: {'enabled': False}"]
    parts = []
    epoch = -1
    for i in range(run.n):
        g = run.steps[i]
        e, k = (g - 1) // per, (g - 1) % per + 1
        if e != epoch:
            if epoch >= 0:
                parts.append("\n")
                parts.append(f"INFO:torchtune.utils._logging:Model checkpoint of size 4.98 GB saved to /tmp/Llama-3.2-1B/epoch_{epoch}/model-00001-of-00001.safetensors\n")
            parts.append(f"\r{e}|{g - 1}:   0%|          | 0/{per} [00:00<?, ?it/s]")
            epoch = e
        loss = run.show(i, f"{run.loss[i]:.4f}")
        parts.append("\r" + tqdm_meter(k, per, k * 0.61, desc=f"{e + 1}|{g}|Loss: {loss}"))
    parts.append("\n")
    return "\n".join(head) + "\n" + "".join(parts)


def torchtune_disk(run: Run) -> str:
    """torchtune DiskLogger's log_<ts>.txt: ``Step N | loss:X lr:Y tokens_per_second_per_gpu:Z ...``."""
    out = []
    for i in range(run.n):
        g = run.steps[i]
        v = run.loss[i]
        loss = run.show(i, str(v))
        out.append(f"Step {g} | loss:{loss} lr:{run.lr(g, 2e-5)} tokens_per_second_per_gpu:{1843.2 + run.rng.gauss(0, 30)} "
                   f"peak_memory_active:{17.213 + run.rng.uniform(0, .01)} peak_memory_alloc:17.213 peak_memory_reserved:18.9 "
                   f"grad_norm:{run.gnorm(i)} ")
    return "\n".join(out) + "\n"


def accelerate_sp(run: Run) -> str:
    """The accelerate ALST/Ulysses example: per batch a seqlen line and ``N: loss=tensor(...)``."""
    out = ["[2026-03-02 09:14:05,120] [INFO] [real_accelerator.py:254:get_accelerator] Setting ds_accelerator to cuda (auto detect)",
           "Detected kernel version 5.4.0, which is below the recommended minimum of 5.5.0; this can cause the process to hang.",
           "[rank0]: warnings.warn(  # UserWarning: sequence parallel is experimental"]
    for i in range(run.n):
        it = run.steps[i]
        out.append(f"batch {it}: seqlen: {8192 - 64 * run.rng.randrange(3)}")
        v = run.loss[i]
        loss = run.show(i, "nan" if math.isnan(v) else f"{v:.4f}")
        out.append(f"{it}: loss=tensor({loss}, device='cuda:0', grad_fn=<DivBackward0>)")
    return "\n".join(out) + "\n"


def picotron(run: Run) -> str:
    """picotron train.py stdout."""
    out = ["rank 0: Creating model config", "init dataloader time: 12.41s", "Number of parameters: 1.24B",
           f"Starting training with {run.total} steps"]
    tok = 0
    for i in range(run.n):
        s = run.steps[i]
        tok += 1048576
        loss = run.show(i, f"{run.loss[i]:6.4f}")
        tps = 1048576 / (2.1 + run.rng.uniform(-0.02, 0.02))
        out.append(f"[rank 0] Step: {s:<5d} | Loss: {loss} | Global batch size: {readable(1048576):>7s} | Tokens/s: {readable(tps):>7s} | "
                   f"Tokens/s/GPU: {readable(tps / 8):>7s} | Tokens: {readable(tok):>7s}/{readable(1e9)} | MFU: {43.1 + run.rng.uniform(-.3, .3):5.2f}% | "
                   f"Memory usage: {61.27:6.2f}GB")
    return "\n".join(out) + "\n"


def lingua(run: Run) -> str:
    """lingua apps.main.train stdout (rank-prefixed LogFormatter)."""
    clock = Clock(run.rng)
    t0 = clock.t

    def pre(dt: float = 0.01, level: str = "INFO") -> str:
        t = clock.tick(dt)
        return f"0: {level:<7} {t:%y-%m-%d %H:%M:%S}.{t.microsecond:06d} - {timedelta(seconds=round((t - t0).total_seconds()))} - "

    out = [pre() + "Starting job: llama_1B", pre() + "Building model", pre() + "Model size: 1,401,217,024 total parameters",
           pre() + "GPU capacity: NVIDIA H100 80GB HBM3 (0) with 79.11GiB memory", pre() + "Starting build of optimizer..."]
    for i in range(run.n):
        s = run.steps[i]
        v = run.loss[i]
        shown = round(v, 4) if math.isfinite(v) else v
        loss = run.show(i, f"{shown:>7}")
        it = round(0.9123 + run.rng.uniform(-.01, .01), 4)
        out.append(pre(0.91 * run.spec.interval) + f"step: {s}  acc: 0  loss: {loss}  grad: {run.gnorm(i):.2e}  flops: {3.21e14:.2e}  "
                   f"wps: {1.13e5:.2e}  iter: {it:>7}  data: {0.0004:>5}  lr: {run.lr(s, 3e-3):.2e}  mem: 71%  pow: 612.314 W")
        if s % 1000 == 0:
            out.append(pre() + f"Saving to: /checkpoints/llama_1B/checkpoints/{s:010d}")
    return "\n".join(out) + "\n"


FIXTURES = [
    Spec("torchtune__console_spike.log", "torchtune", TT, "global_step", "Loss", torchtune_console, points=600, interval=1,
         first=1, seed=1401, events=(Event(EventKind.SPIKE, 0.5),),
         notes="the loss is inside the tqdm *description* '1|12|Loss: 2.3456:   2%|..| 12/500 [...]', one \\r line per epoch; "
               "step = the middle number (global step)"),
    Spec("torchtune__disklog_healthy.txt", "torchtune", TTD, "step", "loss", torchtune_disk, points=300, interval=1, first=1,
         seed=1402, notes="DiskLogger txt: 'Step N | loss:X lr:Y ...' with full-precision str(float) values and a trailing space"),
    Spec("accelerate_example__nan.log", "HF accelerate example", ACC, "iter", "loss", accelerate_sp, points=400, interval=1,
         first=0, seed=1403, events=(Event(EventKind.NONFINITE, 0.8),),
         notes="'N: loss=tensor(X, device='cuda:0', grad_fn=<DivBackward0>)' per batch (N from 0) after 'batch N: seqlen: S' "
               "(seqlen is no loss); NaN shows as tensor(nan, ...)"),
    Spec("accelerate_example__healthy.log", "HF accelerate example", ACC, "iter", "loss", accelerate_sp, points=200,
         interval=1, first=0, seed=1406, notes="healthy"),
    Spec("lingua__healthy.log", "lingua", LINGUA, "step", "loss", lingua, points=200, interval=10, seed=1407, notes="healthy"),
    Spec("picotron__healthy.log", "picotron", PICO, "step", "Loss", picotron, points=375, interval=1, first=1, seed=1404,
         notes="'[rank 0] Step: N     | Loss: X | Global batch size: 1.05M | ...' (left-aligned step, K/M/B suffixes)"),
    Spec("lingua__divergence.log", "lingua", LINGUA, "step", "loss", lingua, points=300, interval=10, seed=1405,
         events=(Event(EventKind.DIVERGENCE, 0.65),),
         notes="prefix '0: INFO    26-03-02 09:14:05.123456 - 0:00:12 - '; 'step: N  acc: 0  loss:  2.3456  grad: ..'"),
]
