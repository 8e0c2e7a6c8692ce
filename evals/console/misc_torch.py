"""Smaller trainers with one-line step records: nanotron, mlx_lm (LoRA), DeepSpeed pipeline engine.

Formats taken from:
- github.com/huggingface/nanotron @ 2411b022a75fb7f7561a1bb4166706da5e1b76de: src/nanotron/trainer.py (``LogItem`` list:
  consumed_tokens, time_per_iteration_ms, tokens_per_sec, tokens_per_sec_per_gpu, global_batch_size, lm_loss, lr,
  model_tflops_per_gpu, eta), src/nanotron/logging/base.py ``LoggerWriter.add_scalars_from_list`` (``iteration: {step} /
  {total} | tag: value | ...``), ``human_format`` (3 significant digits, K/M/B suffixes) and the formatter
  ``\\033[2;3m%(asctime)s [%(levelname)s|DP=0|PP=0|TP=0]\\033[0m: %(message)s`` with ``%m/%d %H:%M:%S``.
- github.com/ml-explore/mlx-lm @ d39cfec103a2a7f9ff9779c9f15c9eb9709bba01: mlx_lm/tuner/trainer.py ``Iter {it}: Train loss
  {:.3f}, Learning Rate {:.3e}, It/sec {:.3f}, Tokens/sec {:.3f}, Trained Tokens {n}, Peak mem {:.3f} GB`` and
  ``Iter {it}: Val loss {:.3f}, Val took {:.3f}s``; mlx_lm/lora.py ``Loading pretrained model`` ... ``Training``.
- github.com/deepspeedai/DeepSpeed @ edaa7221267243c7be7fb49c5d5f5c4fb97b4641: deepspeed/runtime/pipe/engine.py
  ``steps: {global_steps} loss: {loss:0.4f} iter time (s): {:0.3f} samples/sec: {:0.3f}`` (print) and engine.py
  ``[Rank 0] step={step}, skipped={n}, lr={lr}, mom={mom}`` via deepspeed/utils/logging.py (formatter ``[%(asctime)s]
  [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] %(message)s``).
"""

from __future__ import annotations

import math
from datetime import timedelta

from evals.console.curve import Event, EventKind
from evals.console.fixture import Clock, Run, Spec

NANOTRON = "github.com/huggingface/nanotron src/nanotron/trainer.py + logging/base.py (2411b022a75fb7f7561a1bb4166706da5e1b76de)"
MLX = "github.com/ml-explore/mlx-lm mlx_lm/tuner/trainer.py (d39cfec103a2a7f9ff9779c9f15c9eb9709bba01)"
DSPIPE = "github.com/deepspeedai/DeepSpeed deepspeed/runtime/pipe/engine.py + engine.py (edaa7221267243c7be7fb49c5d5f5c4fb97b4641)"


def human_format(num: float) -> str:
    """nanotron's ``human_format``."""
    if math.isnan(num):
        return "nan"
    if abs(num) < 1:
        return f"{num:.3g}"
    sizes = ["", "K", "M", "B", "T", "P", "E"]
    num = float(f"{num:.3g}")
    mag = 0
    while abs(num) >= 1000 and mag < len(sizes) - 1:
        mag += 1
        num /= 1000.0
    return "{}{}".format(f"{num:f}".rstrip("0").rstrip("."), sizes[mag])


def nanotron(run: Run) -> str:
    """nanotron run_train.py stdout (dim/italic ANSI prefix)."""
    clock = Clock(run.rng)
    pre = lambda dt=0.01: f"\033[2;3m{clock.tick(dt):%m/%d %H:%M:%S} [INFO|DP=0|PP=0|TP=0]\033[0m: "
    out = [pre() + "Config:", pre() + "Model Config:", pre() + "Total number of parameters: 1.71G (3264.10MiB)",
           pre() + "[Start training] datetime: 2026-03-02 09:14:21.112233 | mbs: 4 | grad_accum: 32 | global_batch_size: 1024 | "
                   f"sequence_length: 2048 | train_steps: {run.total} | start_iteration_step: 0 | consumed_train_samples: 0"]
    for i in range(run.n):
        s = run.steps[i]
        v = run.loss[i]
        ms = 4123.0 * (1 + run.rng.uniform(-0.01, 0.01))
        loss = run.show(i, human_format(v))
        out.append(pre(ms * run.spec.interval / 1000) + " | ".join([
            f"iteration: {s} / {run.total}", f"consumed_tokens: {human_format(s * 2097152.0)}",
            f"time_per_iteration_ms: {human_format(ms)}", f"tokens_per_sec: {human_format(2097152 / ms * 1000)}",
            f"tokens_per_sec_per_gpu: {human_format(2097152 / ms * 1000 / 64)}", "global_batch_size: 2.1M",
            f"lm_loss: {loss}", f"lr: {human_format(run.lr(s))}", f"model_tflops_per_gpu: {human_format(391.0 * 4123 / ms)}",
            f"eta: {timedelta(seconds=int((run.total - s) * ms / 1000))}"]))
        if s % 1000 == 0:
            out.append(pre() + f"Saving checkpoint at checkpoints/{s}")
    return "\n".join(out) + "\n"


def mlx_lm(run: Run) -> str:
    """mlx_lm.lora stdout."""
    out = ["Loading pretrained model", "Fetching 7 files: 100%|██████████| 7/7 [00:00<00:00, 54120.05it/s]", "Loading datasets",
           "Training", "Trainable parameters: 0.071% (5.243M/7241.732M)", "Starting training..., iters: %d" % run.total,
           "Iter 1: Val loss 2.898, Val took 12.412s"]
    tok = 0
    for i in range(run.n):
        it = run.steps[i]
        tok += 4812 * run.spec.interval
        loss = run.show(i, f"{run.loss[i]:.3f}")
        out.append(f"Iter {it}: Train loss {loss}, Learning Rate {1e-5:.3e}, It/sec {0.512 + run.rng.uniform(-.01, .01):.3f}, "
                   f"Tokens/sec {2463.1 + run.rng.gauss(0, 20):.3f}, Trained Tokens {tok}, Peak mem 17.214 GB")
        if it % 200 == 0:
            out.append(f"Iter {it}: Val loss {run.loss[i] + 0.07:.3f}, Val took 12.301s")
        if it % 100 == 0:
            out.append(f"Iter {it}: Saved adapter weights to adapters/adapters.safetensors and adapters/{it:07d}_adapters.safetensors.")
    return "\n".join(out) + "\n"


def ds_pipe(run: Run) -> str:
    """A DeepSpeed PipelineEngine run (steps_per_print = spec.interval)."""
    clock = Clock(run.rng)

    def ds(where: str, msg: str, dt: float = 0.01) -> str:
        t = clock.tick(dt)
        return f"[{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d}] [INFO] [{where}] {msg}"

    out = [ds("logging.py:128:log_dist", "[Rank 0] DeepSpeed info: version=0.16.4, git-hash=unknown, git-branch=unknown"),
           ds("engine.py:1436:_configure_optimizer", "Using DeepSpeed Optimizer param name adamw as basic optimizer"),
           ds("engine.py:1100:_configure_zero_optimizer", "Creating ZeRO stage 1 optimizer"),
           ds("engine.py:140:__init__", "is_pipe_partitioned= False is_grad_partitioned= False"),
           ds("engine.py:159:__init__", "CONFIG: micro_batches=8 micro_batch_size=4"),
           "[2026-03-02 09:15:02,113] [INFO] [engine.py:202:__init__] RANK=0 STAGE=0 LAYERS=17 [0, 17) STAGE_PARAMS=604113920 "
           "(604.114M) TOTAL_PARAMS=1208227840 (1208.228M) UNIQUE_PARAMS=1208227840 (1208.228M)"]
    for i in range(run.n):
        s = run.steps[i]
        lr = run.lr(s, 1e-4)
        out.append(ds("logging.py:128:log_dist", f"[Rank 0] step={s}, skipped=0, lr=[{lr}], mom=[(0.9, 0.95)]", 0.52 * run.spec.interval))
        loss = run.show(i, f"{run.loss[i]:0.4f}")
        out.append(f"steps: {s} loss: {loss} iter time (s): {0.521 + run.rng.uniform(-.01, .01):0.3f} samples/sec: {61.4 + run.rng.uniform(-1, 1):0.3f}")
    return "\n".join(out) + "\n"


FIXTURES = [
    Spec("nanotron__healthy.log", "nanotron", NANOTRON, "iteration", "lm_loss", nanotron, points=225, interval=10, seed=1201,
         notes="dim/italic ANSI around the prefix; 'iteration: N / M | ... | lm_loss: 2.35 | ...' with human_format (3 significant "
               "digits, K/M suffixes: consumed_tokens: 21M)"),
    Spec("nanotron__spike.log", "nanotron", NANOTRON, "iteration", "lm_loss", nanotron, points=225, interval=10, seed=1202,
         events=(Event(EventKind.SPIKE, 0.35),), notes="spike"),
    Spec("mlx_lm__healthy.log", "mlx_lm", MLX, "iter", "Train loss", mlx_lm, points=375, interval=10, seed=1203,
         notes="'Iter N: Train loss X, Learning Rate ..' every 10 iters; 'Iter N: Val loss' every 200 (a different series)"),
    Spec("deepspeed_pipe__healthy.log", "DeepSpeed", DSPIPE, "steps", "loss", ds_pipe, points=350, interval=10, seed=1204,
         notes="'[Rank 0] step=N, skipped=0, lr=[..]' log_dist lines interleaved with the pipe engine's own 'steps: N loss: X' lines"),
    Spec("deepspeed_pipe__divergence.log", "DeepSpeed", DSPIPE, "steps", "loss", ds_pipe, points=350, interval=10, seed=1205,
         events=(Event(EventKind.DIVERGENCE, 0.6),), notes="divergence; the loss is only on the 'steps: N loss: X' lines"),
]
