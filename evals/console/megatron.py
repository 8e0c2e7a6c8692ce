"""Megatron-LM and Megatron-DeepSpeed: ``iteration N/M | ... | lm loss: X.XXXXXXE+00 | loss scale: S |`` lines.

Formats taken from:
- github.com/NVIDIA/Megatron-LM @ d98e8a64ddf34856e74b24714e3bedb2f5a39553 (core_v0.15.0rc7-2333):
  megatron/training/training.py ``training_log`` (`` [datetime] iteration {:8d}/{:8d} | consumed samples: {:12d} |
  elapsed time per iteration (ms): {:.1f} | throughput per GPU (TFLOP/s/GPU): {:.1f} | learning rate: {:.6E} |
  global batch size: {:5d} | {key}: {:.6E} | loss scale: {:.1f} | grad norm: {:.3f} | number of skipped iterations:
  {:3d} | number of nan iterations: {:3d} |``; a loss average is printed only ``if avg >= 0.0`` and skipped
  iterations add nothing to it); ``evaluate_and_print_results`` (`` validation loss at iteration N | lm loss value:
  {:.6E} | lm loss PPL: {:.6E} |`` between rules of ``-``); megatron/training/checkpointing.py save lines; megatron/core/timers.py ``(min, max) time across ranks (ms):``
  with names padded by ``ljust(48, '.')`` (the start-up setup timers);
  megatron/core/rerun_state_machine.py ``validate_result``: ``RuntimeError(f"Rank {rank}, node {node}, device
  {device}, iteration {it}: Unexpected result {result} (message='{message}')")`` with the message
  ``found NaN in local forward loss calculation`` from pretrain_gpt.py (raised when --check-for-nan-in-loss-and-grad).
- github.com/deepspeedai/Megatron-DeepSpeed megatron/training.py ``training_log`` @ 4efb479d5317ce9b86096b9d8e3e8030b0b5263b
  (`` iteration {:8d}/{:8d} | consumed samples: | consumed tokens: | elapsed time per iteration (ms): | learning rate:
  {:.3E} | global batch size: | lm loss: {:.6E} | loss scale: {:.1f} | grad norm: | actual seqlen: | number of skipped
  iterations: | number of nan iterations: | samples per second: | tokens per gpu per second (tgs): | TFLOPs: |``,
  loss printed only ``if avg > 0.0``), interleaved with DeepSpeed's own lines from github.com/deepspeedai/DeepSpeed
  @ edaa7221267243c7be7fb49c5d5f5c4fb97b4641: deepspeed/utils/logging.py formatter ``[%(asctime)s] [%(levelname)s]
  [%(filename)s:%(lineno)d:%(funcName)s] %(message)s`` with ``[Rank 0] `` from log_dist, engine.py ``step={step},
  skipped={n}, lr={lr}, mom={mom}`` and fp16/loss_scaler.py ``[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted
  loss scale: {S}, reducing to {S/2}``.
"""

from __future__ import annotations

import math
from datetime import datetime

from evals.console.curve import Event, EventKind
from evals.console.fixture import Clock, Run, Spec

LM = ("github.com/NVIDIA/Megatron-LM megatron/training/training.py + megatron/core/rerun_state_machine.py "
      "(d98e8a64ddf34856e74b24714e3bedb2f5a39553)")
MDS = ("github.com/deepspeedai/Megatron-DeepSpeed megatron/training.py (4efb479d5317ce9b86096b9d8e3e8030b0b5263b) + "
       "github.com/deepspeedai/DeepSpeed deepspeed/runtime/engine.py, fp16/loss_scaler.py (edaa7221267243c7be7fb49c5d5f5c4fb97b4641)")


def _dt(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S.%f")


def _banner(run: Run, fp16: bool) -> list[str]:
    args = [("accumulate_allreduce_grads_in_fp32", "False"), ("bf16", str(not fp16)),
            ("check_for_nan_in_loss_and_grad", "True"), ("clip_grad", "1.0"), ("fp16", str(fp16)),
            ("global_batch_size", "512"), ("hidden_size", "4096"), ("initial_loss_scale", "4294967296"),
            ("log_interval", str(run.spec.interval)), ("loss_scale", "None"), ("lr", "0.0003"),
            ("lr_decay_style", "cosine"), ("micro_batch_size", "4"), ("min_loss_scale", "1.0"),
            ("num_attention_heads", "32"), ("num_layers", "32"), ("seq_length", "4096"),
            ("tensor_model_parallel_size", "2"), ("train_iters", str(run.total))]
    out = ["using world size: 16, data-parallel size: 8, context-parallel size: 1, tensor-model-parallel size: 2, "
           "pipeline-model-parallel size: 1",
           f"using torch.{'float16' if fp16 else 'bfloat16'} for parameters ...",
           "------------------------ arguments ------------------------"]
    out += [f"  {k} {'.' * (48 - len(k))} {v}" for k, v in args]
    out += ["-------------------- end of arguments ---------------------",
            "> initializing torch distributed ...", "> initialized tensor model parallel with size 2",
            "> setting random seeds to 1234 ...", "> building GPT model ...",
            " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 3384033280",
            "> building train, validation, and test datasets ...", "> finished creating GPT datasets ...",
            "[after dataloaders are built] datetime: 2026-03-02 09:15:41 ", "done with setup ...",
            "(min, max) time across ranks (ms):",
            "    " + "model-and-optimizer-setup ".ljust(48, ".") + ": (8123.41, 8141.07)",
            "    " + "train/valid/test-data-iterators-setup ".ljust(48, ".") + ": (1502.33, 1544.90)",
            "training ...", "[before the start of training step] datetime: 2026-03-02 09:15:42 "]
    return out


def megatron_lm(run: Run, fp16: bool = False, collapse_at: int | None = None) -> str:
    """Megatron-LM console; bf16 prints ``loss scale: 1.0`` on every line."""
    clock = Clock(run.rng)
    out = _banner(run, fp16)
    scale = 65536.0 if fp16 else 1.0
    nan_at = run.nan_from()
    iv = run.spec.interval
    for i in range(run.n):
        it = run.steps[i]
        if nan_at is not None and i == nan_at:
            bad = it - iv + 1 + run.rng.randrange(iv)
            out += ["[rank0]: Traceback (most recent call last):",
                    '[rank0]:   File "/workspace/Megatron-LM/pretrain_gpt.py", line 312, in <module>',
                    "[rank0]:     pretrain(",
                    '[rank0]:   File "/workspace/Megatron-LM/megatron/training/training.py", line 1051, in pretrain',
                    "[rank0]:     iteration, num_floating_point_operations_so_far = train(",
                    '[rank0]:   File "/workspace/Megatron-LM/megatron/core/rerun_state_machine.py", line 534, in validate_result',
                    "[rank0]:     raise RuntimeError(full_message)",
                    f"[rank0]: RuntimeError: Rank 0, node gpu-node-017, device 0, iteration {bad}: Unexpected result nan "
                    "(message='found NaN in local forward loss calculation')",
                    "E1125 11:02:17.441000 1183 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
                    "local_rank: 0 (pid: 1250) of binary: /usr/bin/python"]
            run.crash(bad)
            run.event_steps = [(k.value, bad if k is EventKind.NONFINITE else run.steps[j]) for k, j in run.onsets()]
            break
        skipped = nan_it = 0
        loss_txt = None
        if fp16 and collapse_at is not None and i >= collapse_at:
            skipped = iv
            scale = max(1.0, scale / 2 ** (iv // 2))
        else:
            if fp16 and run.rng.random() < 0.02:
                skipped = 1
                scale /= 2
            elif fp16 and i % 100 == 99:
                scale *= 2
            loss_txt = run.show(i, f"{run.loss[i]:.6E}")
        ms = 3150.0 * (1 + run.rng.uniform(-0.02, 0.02))
        line = (f" [{_dt(clock.tick(ms * iv / 1000))}] iteration {it:8d}/{run.total:8d} | consumed samples: "
                f"{it * 512:12d} | elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): "
                f"{431.0 * 3150 / ms:.1f} | learning rate: {run.lr(it):.6E} | global batch size:   512 |")
        if loss_txt is not None:
            line += f" lm loss: {loss_txt} |"
        elif skipped == iv:  # nothing added since the last reset: avg 0.0 passes `avg >= 0.0`
            line += f" lm loss: {0.0:.6E} |"
        line += f" loss scale: {scale:.1f} |"
        if skipped < iv:
            line += f" grad norm: {run.gnorm(i):.3f} |"
        line += f" number of skipped iterations: {skipped:3d} | number of nan iterations: {nan_it:3d} |"
        out.append(line)
        if it % (iv * 40) == 0 and loss_txt is not None:
            v = run.loss[i] + 0.04
            s = f" validation loss at iteration {it} | lm loss value: {v:.6E} | lm loss PPL: {math.exp(min(20, v)):.6E} | "
            out += ["-" * (len(s) + 1), s, "-" * (len(s) + 1)]
            out.append(f"[{_dt(clock.tick(5))}] saving checkpoint at iteration {it:7d} to /checkpoints/gpt-7b in torch_dist format")
            out.append(f"  [{_dt(clock.tick(40))}] successfully saved checkpoint from iteration {it:7d} to /checkpoints/gpt-7b "
                       "[ t 1/2, gtp_remat 1/1, p 1/1 ]")
    return "\n".join(out) + "\n"


def megatron_lm_fp16_collapse(run: Run) -> str:
    """fp16 run whose loss scale collapses: every iteration skipped, ``lm loss: 0.000000E+00`` (no real loss)."""
    _, at = run.onsets()[0]
    return megatron_lm(run, fp16=True, collapse_at=at)


def megatron_ds(run: Run, fp16: bool = False) -> str:
    """Megatron-DeepSpeed console: DeepSpeed's log_dist lines interleaved with Megatron's iteration lines."""
    clock = Clock(run.rng)
    out = _banner(run, fp16)
    iv = run.spec.interval
    scale = 65536.0
    spike = {j for k, j in run.onsets() if k is EventKind.SPIKE}

    def ds(where: str, msg: str, level: str = "INFO") -> None:
        t = clock.tick(0.01)
        out.append(f"[{t.strftime('%Y-%m-%d %H:%M:%S')},{t.microsecond // 1000:03d}] [{level}] [{where}] {msg}")

    ds("logging.py:128:log_dist", "[Rank 0] DeepSpeed info: version=0.16.4, git-hash=unknown, git-branch=unknown")
    ds("config.py:1003:print", "DeepSpeedEngine configuration:")
    for i in range(run.n):
        it = run.steps[i]
        skipped = 0
        if fp16 and (i in spike or run.rng.random() < 0.015):
            skipped = 1
            ds("loss_scaler.py:183:update_scale", f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
               f"{int(scale)}, reducing to {int(scale / 2)}")
            scale /= 2
        elif fp16 and i % 100 == 99:
            scale *= 2
        lr = run.lr(it)
        ds("logging.py:128:log_dist", f"[Rank 0] step={it}, skipped={skipped}, lr=[{lr}, {lr}], mom=[(0.9, 0.95), (0.9, 0.95)]")
        ms = 2890.0 * (1 + run.rng.uniform(-0.02, 0.02))
        clock.tick(ms * iv / 1000)
        loss = run.show(i, f"{run.loss[i]:.6E}")
        out.append(f" iteration {it:8d}/{run.total:8d} | consumed samples: {it * 256:12d} | consumed tokens: "
                   f"{it * 256 * 2048:12d} | elapsed time per iteration (ms): {ms:.1f} | learning rate: {lr:.3E} | "
                   f"global batch size:   256 | lm loss: {loss} | loss scale: {scale if fp16 else 1.0:.1f} | "
                   f"grad norm: {run.gnorm(i):.3f} | actual seqlen:  2048 | number of skipped iterations: {skipped:3d} | "
                   f"number of nan iterations:   0 | samples per second: {256 / ms * 1000:.3f} | "
                   f"tokens per gpu per second (tgs): {256 * 2048 / ms * 1000 / 64:.3f} | TFLOPs: {148.2 * 2890 / ms:.2f} |")
    return "\n".join(out) + "\n"


FIXTURES = [
    Spec("megatron_lm__bf16_healthy.log", "Megatron-LM", LM, "iteration", "lm loss", megatron_lm, points=150,
         interval=10, seed=301,
         notes="bf16: 'loss scale: 1.0' on every line is no collapse; validation lines 'lm loss value:' every 500 iterations"),
    Spec("megatron_lm__bf16_nan_crash.log", "Megatron-LM", LM, "iteration", "lm loss", megatron_lm, points=225,
         interval=10, seed=302, events=(Event(EventKind.NONFINITE, 0.72),),
         notes="the run dies on a NaN: torchrun traceback ending 'RuntimeError: Rank 0, ..., iteration N: Unexpected result nan "
               "(message='found NaN in local forward loss calculation')' at an iteration between two log lines"),
    Spec("megatron_lm__fp16_scale_collapse.log", "Megatron-LM", LM, "iteration", "lm loss", megatron_lm_fp16_collapse,
         points=165, interval=10, seed=303, events=(Event(EventKind.LOSS_SCALE_COLLAPSE, 0.8),),
         notes="fp16 dynamic loss scale: occasional single skipped iterations (normal), then every iteration skipped, the scale "
               "halves down to 1.0 and lines then show 'lm loss: 0.000000E+00' (Megatron averages over non-skipped iterations only: "
               "nothing was added). Those 0.0 values are NOT loss points and are left out of steps/count"),
    Spec("megatron_deepspeed__bf16_spike.log", "Megatron-DeepSpeed", MDS, "iteration", "lm loss", megatron_ds, points=97,
         interval=1, first=1, seed=304, events=(Event(EventKind.SPIKE, 0.5),),
         notes="DeepSpeed '[Rank 0] step=N, skipped=0, lr=[...]' lines interleave with Megatron's iteration lines (log_interval 1)"),
    Spec("megatron_deepspeed__fp16_healthy.log", "Megatron-DeepSpeed", MDS, "iteration", "lm loss",
         lambda r: megatron_ds(r, fp16=True), points=97, interval=1, first=1, seed=305,
         notes="fp16: occasional 'OVERFLOW! Rank 0 Skipping step' lines and loss-scale halvings are normal, not events"),
]
