"""Render the held-out trainer-console fixtures in evals/heldout/console/ (seeded, deterministic).

    python evals/heldout/render.py          # rewrites console/*.log and console/MANIFEST.json

Each ``render_<trainer>`` function reproduces the per-step line of one trainer as its source prints
it (repository and path in ``SOURCES``), with start-up output around it, a plausible loss curve
(warm-up, decay, noise) and 0-1 planted events printed the way that trainer prints them. The
curves are synthetic; the line formats are the point. Where a surrounding line (start-up banner,
evaluation line) was not checked against source it is marked "approximate" in the manifest notes.
No third-party code is copied: the format strings are re-expressed with Python formatting.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import random
import struct
from pathlib import Path

OUT = Path(__file__).resolve().parent / "console"
T0 = dt.datetime(2025, 3, 14, 9, 26, 53)

SOURCES = {
    "gpt_neox": "github.com/EleutherAI/gpt-neox megatron/logging.py training_log() (commit 018b8a9)",
    "picotron": "github.com/huggingface/picotron train.py (per-step print in the main loop, commit 12e81c3)",
    "lingua": "github.com/facebookresearch/lingua apps/main/train.py (logger.info step line) + lingua/logger.py LogFormatter",
    "easylm": "github.com/young-geng/EasyLM EasyLM/models/llama/llama_train.py (tqdm.write(pprint.pformat(log_metrics)))",
    "big_vision": "github.com/google-research/big_vision big_vision/utils.py BigVisionMetricWriter.measure + big_vision/train.py (RuntimeError on non-finite training_loss)",
    "open_clip": "github.com/mlfoundations/open_clip src/open_clip_train/train.py train_one_epoch() logging.info + src/open_clip_train/logger.py",
    "x_transformers": "github.com/lucidrains/x-transformers examples/enwik8_simple/train.py (print per iteration, tqdm desc='training')",
    "kohya_sd_scripts": "github.com/kohya-ss/sd-scripts train_network.py (tqdm desc='steps', set_postfix(avr_loss=...))",
    "k_diffusion": "github.com/crowsonkb/k-diffusion train.py (tqdm.write every 25 steps, commit 01e169d)",
    "fastai": "github.com/fastai/fastai fastai/callback/progress.py ProgressCallback._write_stats + github.com/fastai/fastprogress fastprogress/fastprogress.py ConsoleMasterBar.write",
}


def f32(x: float) -> float:
    """Round a Python float through float32, as a value read back from a GPU tensor is."""
    return struct.unpack("f", struct.pack("f", x))[0]


def f32_short(x: float) -> str:
    """Shortest decimal that round-trips in float32, laid out as numpy prints a float32 scalar."""
    v = f32(x)
    if math.isnan(v):
        return "nan"
    if v == 0 or 1e-4 <= abs(v) < 1e16:
        for p in range(0, 12):
            s = f"{v:.{p}f}"
            if f32(float(s)) == v:
                return s if p else s + "."
    for p in range(0, 9):
        s = f"{v:.{p}e}"
        if f32(float(s)) == v:
            return s
    return repr(v)


def lm_curve(rng: random.Random, n: int, start: float, end: float, tau: float, noise: float) -> list[float]:
    """A plausible loss curve: fast early drop, slow tail, multiplicative noise."""
    out = []
    for i in range(1, n + 1):
        base = end + (start - end) * math.exp(-i / tau) + 0.15 * (end * (1 - i / n))
        out.append(max(1e-4, base * (1 + rng.gauss(0, noise))))
    return out


def ts(sec: float) -> dt.datetime:
    """Wall-clock time ``sec`` seconds after the run start."""
    return T0 + dt.timedelta(seconds=sec)


class Fixture:
    """Collects the text of one console file and the loss points as printed."""

    def __init__(self, name: str):
        self.name = name
        self.parts: list[str] = []
        self.points: list[tuple[int, str]] = []  # (step in this file's numbering, loss as printed)

    def line(self, s: str = "") -> None:
        self.parts.append(s + "\n")

    def raw(self, s: str) -> None:
        self.parts.append(s)

    def point(self, step: int, printed: str) -> None:
        self.points.append((step, printed))

    def text(self) -> str:
        return "".join(self.parts)


def render_gpt_neox() -> tuple[Fixture, dict]:
    """GPT-NeoX: ' samples/sec ... | iteration N/M | ... | lm_loss: X.XXXXXXE+00 | loss scale: ...'."""
    rng, fx = random.Random(101), Fixture("gpt_neox__125M_fp16.log")
    fx.line("NeoXArgs.from_ymls() ['configs/125M.yml', 'configs/local_setup.yml']")
    fx.line("INFO:root:NeoXArgs.calculate_derived() Total number of GPUs determined to be: 8")
    fx.line("-------------------- arguments --------------------")
    for k, v in [("attention_config", "['global', 'global', 'global', 'global', 'global', 'global', 'global', 'global', 'global', 'global', 'global', 'global']"),
                 ("fp16", "{'enabled': True, 'loss_scale': 0, 'loss_scale_window': 1000, 'hysteresis': 2, 'min_loss_scale': 1}"),
                 ("log_interval", "10"), ("lr", "0.0006"), ("train_iters", "2000"), ("seq_length", "2048")]:
        fx.line(f"  {k} {'.' * max(2, 32 - len(k))} {v}")
    fx.line("---------------- end of arguments ----------------")
    fx.line("> building GPT2BPETokenizer tokenizer ...")
    fx.line(" > padded vocab (size: 50257) with 47 dummy tokens (new size: 50304)")
    fx.line("> initializing torch distributed ...")
    fx.line("building GPT2 model ...")
    fx.line(f"[{ts(41):%Y-%m-%d %H:%M:%S},112] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.12.4+02e2ebf, git-hash=02e2ebf, git-branch=HEAD")
    fx.line("Number of parameters: 162322944")
    loss = lm_curve(rng, 200, 10.95, 2.95, 18.0, 0.012)
    spike_i = 123  # logged iteration 1230
    for k, m in [(0, 2.3), (1, 1.55), (2, 1.18), (3, 1.05)]:
        loss[spike_i - 1 + k] *= m
    scale, skipped = 65536.0, 0
    for j in range(1, 201):
        it = j * 10
        lr = 6e-4 * min(1.0, it / 200) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * it / 2000)))
        sk = 1 if j == spike_i else 0
        if sk:
            scale /= 2
        fx.line(f"[{ts(45 + 6.2 * it):%Y-%m-%d %H:%M:%S},{rng.randint(0, 999):03d}] [INFO] [logging.py:96:log_dist] [Rank 0] "
                f"step={it}, skipped={skipped + sk}, lr=[{lr!r}, {lr!r}], mom=[[0.9, 0.95], [0.9, 0.95]]")
        skipped += sk
        sps = 256 / (0.62 + rng.gauss(0, 0.01))
        v = "{:.6E}".format(loss[j - 1])
        fx.line(f" samples/sec: {sps:.3f} | iteration {it:8d}/{2000:8d} | elapsed time per iteration (ms): {256000 / sps / 10 * 10:.1f} |"
                f" learning rate: {lr:.3E} | approx flops per GPU: {52.1 + rng.gauss(0, 0.4):.1f}TFLOPS | lm_loss: {v} |"
                f" loss scale: {scale:.1f} | number of skipped iterations: {sk:3d} | number of nan iterations: {0:3d} |")
        fx.point(it, v)
        if j == 1:
            fx.line("after 10 iterations memory (MB) | allocated: 3094.6513671875 | max allocated: 14210.20751953125 | reserved: 16722.0 | max reserved: 16722.0")
        fx.line(f"time (ms) | forward: {180 + rng.random() * 8:.2f} | backward: {390 + rng.random() * 9:.2f} | optimizer: {28 + rng.random() * 2:.2f} | batch generator: {1.5 + rng.random():.2f}")
        if it % 500 == 0:
            fx.line("-" * 98)
            fx.line(f" validation results at iteration {it} | lm_loss value: {loss[j - 1] * 1.02:.6E} | lm_loss_ppl value: {math.exp(loss[j - 1] * 1.02):.6E} | ")
            fx.line("-" * 98)
    meta = dict(writer="GPT-NeoX", step_key="iteration", loss_key="lm_loss", events=[{"kind": "spike", "step": 1230}],
                notes="fp16 run: DeepSpeed '[Rank 0] step=N, skipped=S, lr=[...]' lines precede every training_log line (same step numbers, no loss); "
                      "the spike at iteration 1230 comes with one skipped iteration and the loss scale halving 65536 -> 32768 (one halving is no collapse), "
                      "and recovers within ~30 iterations. 'validation results' lines are approximate (not from the cited file) and carry a validation lm_loss.")
    return fx, meta


def readable(num: float, precision: int = 2) -> str:
    """picotron-style human-readable counts (T/B/M/K suffixes)."""
    for lim, suf in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if num >= lim:
            return f"{num / lim:.{precision}f}{suf}"
    return f"{num:.{precision}f}"


def render_picotron() -> tuple[Fixture, dict]:
    """picotron: '[rank R] Step: N     | Loss: X.XXXX | Global batch size: ... | MFU: ..% | Memory usage: ...GB'."""
    rng, fx = random.Random(202), Fixture("picotron__llama1b_pp4.log")
    tokens_per_step, max_tokens = 1_048_576, 400 * 1_048_576
    fx.line("init dataloader time: 14.83s")
    fx.line("Tokens per step: " + readable(tokens_per_step))
    fx.line("rank 0: Creating model config")
    fx.line("rank 0: Broadcasting model_config to all ranks")
    fx.line("rank 3: Initializing model meta device")
    fx.line("init model parallel time: 21.06s")
    fx.line("Number of parameters: 1.24B")
    loss = lm_curve(rng, 400, 11.4, 3.35, 35.0, 0.01)
    for step in range(1, 401):
        tps = 98_000 + rng.gauss(0, 1500) if step > 1 else 21_500.0
        v = f"{loss[step - 1]:6.4f}"
        fx.line(f"[rank 3] Step: {step:<5d} | Loss: {v} | Global batch size: {readable(tokens_per_step):>7s} | "
                f"Tokens/s: {readable(tps):>7s} | Tokens/s/GPU: {readable(tps / 4):>7s} | "
                f"Tokens: {readable(step * tokens_per_step):>7s}/{readable(max_tokens)} | MFU: {31.2 * tps / 98_000:5.2f}% | "
                f"Memory usage: {61.23 + rng.random() * 0.05:6.2f}GB")
        fx.point(step, v)
    meta = dict(writer="picotron", step_key="step", loss_key="Loss", events=[],
                notes="Pipeline-parallel run: only the last stage prints, so every line says '[rank 3]' - a rank number that is not a step. "
                      "'Step: N     |' is left-aligned and padded; the 'Tokens: x/y' field holds a ratio with unit suffixes. "
                      "Start-up lines follow the prints in train.py; to_readable_format is re-expressed from picotron/utils.py (approximate).")
    return fx, meta


def render_lingua() -> tuple[Fixture, dict]:
    """lingua: '<rank>: INFO    yy-mm-dd HH:MM:SS.ffffff - h:mm:ss - step: N  acc: 0  loss:  X.XXXX  grad: ...'."""
    rng, fx = random.Random(303), Fixture("lingua__llama1B_nan.log")

    def log(sec: float, msg: str, level: str = "INFO") -> None:
        t = ts(sec)
        fx.line(f"0: {level:<7} {t:%y-%m-%d %H:%M:%S}.{t.microsecond:06d} - {dt.timedelta(seconds=round(sec))} - {msg}")

    log(0.2, "Starting job: llama_1B")
    log(0.3, "Running on dp rank : 0")
    log(0.3, "Running on dp size : 8")
    log(0.4, "Building model")
    log(1.1, "Model is built !")
    log(9.7, "Model size: 1,082,654,720 total parameters")
    log(9.7, "GPU capacity: NVIDIA H100 80GB HBM3 (0) with 79.11GiB memory")
    loss = lm_curve(rng, 120, 11.75, 3.1, 14.0, 0.012)
    nan_from = 73  # logged step 730
    sec = 12.0
    for j in range(1, 121):
        step = j * 10
        sec += 10 * (0.52 + rng.gauss(0, 0.01))
        if step % 1000 == 0:
            log(sec - 0.4, "garbage collection")
        bad = j >= nan_from
        lv = "    nan" if bad else f"{round(loss[j - 1], 4):>7}"
        grad = float("nan") if bad else 0.35 + 3.0 * math.exp(-j / 6) + abs(rng.gauss(0, 0.05))
        lr = 3e-3 * min(1.0, step / 200)
        wps = 4.98e4 + rng.gauss(0, 300)
        log(sec, f"step: {step}  acc: 0  loss: {lv}  grad: {grad:.2e}  flops: {wps * 6.5e9:.2e}  wps: {wps:.2e}"
                 f"  iter: {round(0.5 + rng.random() * 0.05, 4):>7}  data: {round(rng.random() * 0.002, 4):>5}  lr: {lr:.2e}"
                 f"  mem: {78 + rng.random() * 2:.0f}%  pow: {round(650 + rng.random() * 40, 3)} W")
        fx.point(step, lv.strip())
    meta = dict(writer="lingua (Meta)", step_key="step", loss_key="loss", events=[{"kind": "nonfinite", "step": 730}],
                notes="LogFormatter prefix '0: INFO    <date> - <elapsed> - ' (rank, level padded to 7). The loss is right-aligned in 7 columns, so values "
                      "carry leading spaces; two spaces separate fields. lingua keeps training after a NaN: from step 730 every line prints 'loss:     nan  grad: nan'. "
                      "'acc' is the gradient-accumulation counter, not accuracy; 'iter'/'data' are times.")
    return fx, meta


def render_easylm() -> tuple[Fixture, dict]:
    """EasyLM: tqdm (ncols=0) redraws with '\\r' and a pprint'ed metrics dict every log_freq steps."""
    rng, fx = random.Random(404), Fixture("easylm__llama_train.log")
    fx.line("I0314 09:26:55.102811 139871032 xla_bridge.py:889] Unable to initialize backend 'rocm': NOT_FOUND: Could not find registered platform with name: \"rocm\". Available platform names are: CUDA")
    fx.line("I0314 09:26:55.104519 139871032 xla_bridge.py:889] Unable to initialize backend 'tpu': INTERNAL: Failed to open libtpu.so: libtpu.so: cannot open shared object file: No such file or directory")
    total, freq = 3000, 50
    loss = lm_curve(rng, total, 10.6, 2.25, 260.0, 0.02)
    bar_len = 0
    for step in range(0, total):
        if step % 10 == 0:
            el = int(step * 1.58)
            rem = int((total - step) * 1.58)
            bar = f"{100 * step / total:3.0f}% {step}/{total} [{el // 60:02d}:{el % 60:02d}<{rem // 60:02d}:{rem % 60:02d},  {0.63 + rng.gauss(0, 0.01):.2f}it/s]"
            fx.raw("\r" + bar)
            bar_len = len(bar)
        if step % freq == 0:
            acc = min(0.62, 0.02 + 0.6 * (1 - math.exp(-step / 500)))
            lr = 3e-4 * min(1.0, step / 200 + 1e-3)
            vals = dict(accuracy=acc, gradient_norm=0.4 + 4 * math.exp(-step / 150) + abs(rng.gauss(0, 0.05)),
                        learning_rate=lr, loss=loss[step], param_norm=310.0 + step * 0.011)
            body = ",\n ".join(f"'{k}': Array({f32_short(x)}, dtype=float32)" for k, x in vals.items())
            fx.raw("\r" + " " * bar_len + "\r" + "\n{" + body + f",\n 'step': {step}}}\n\n")
            fx.point(step, f32_short(loss[step]))
    fx.raw("\n")
    meta = dict(writer="EasyLM", step_key="step", loss_key="loss", events=[],
                notes="Each record is a pprint'ed dict spread over 7 lines, sorted by key, the loss inside 'Array(x, dtype=float32)'; "
                      "the step is the last key. Between records, tqdm's ncols=0 status (no bar) is redrawn with '\\r' on one long line and "
                      "cleared with spaces before each tqdm.write. The cleared-bar rendering and the two absl start-up lines are approximate.")
    return fx, meta


def render_big_vision() -> tuple[Fixture, dict]:
    """big_vision: absl lines '\\x1b[35m[step]\\x1b[0m name = value', then RuntimeError on a non-finite loss."""
    rng, fx = random.Random(505), Fixture("big_vision__vit_i1k_nan.log")

    def absl(sec: float, where: str, msg: str, lvl: str = "I") -> None:
        t = ts(sec)
        fx.line(f"{lvl}{t:%m%d %H:%M:%S}.{t.microsecond:06d} 140019882 {where}] {msg}")

    absl(2.1, "train.py:112", "NOTE: Initializing...")
    absl(2.3, "train.py:139", "NOTE: Global batch size 1024 on 1 hosts results in 1024 local batch size. With 8 dev per host (8 dev total), that's a 128 per-device batch size.")
    absl(5.8, "train.py:160", "NOTE: Running for 93835 steps, that means 75.000000 epochs")
    absl(44.0, "train.py:330", "NOTE: Initializing train_state...")
    absl(71.5, "train.py:398", "NOTE: First step compilations...")
    loss = lm_curve(rng, 60, 6.95, 4.1, 9.0, 0.008)
    sec = 95.0
    for j in range(1, 61):
        step = j * 50
        sec += 50 * 0.21
        bad = step >= 2600
        lr = 0.001 * min(1.0, step / 10000)
        vals = [("global_schedule", lr), ("training_loss", float("nan") if bad else f32(loss[j - 1])),
                ("l2_grads", float("nan") if bad else f32(0.9 + rng.random() * 0.2)),
                ("l2_params", f32(230.0 + step * 0.004)), ("l2_updates", float("nan") if bad else f32(0.3 + rng.random() * 0.05)),
                ("uptime", sec), ("examples_seen", float(step * 1024)), ("progress", step / 93835),
                ("img/sec/core", 1024 / 0.21 / 8 * (1 + rng.gauss(0, 0.01)))]
        for name, v in vals:
            absl(sec, "utils.py:1096", f"\x1b[35m[{step}]\x1b[0m {name} = {v!r}")
        fx.point(step, repr(vals[1][1]))
        if bad:
            fx.line("Traceback (most recent call last):")
            fx.line('  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main')
            fx.line('    return _run_code(code, main_globals, None,')
            fx.line('  File "/big_vision/big_vision/train.py", line 511, in <module>')
            fx.line("    app.run(main)")
            fx.line('  File "/big_vision/big_vision/train.py", line 439, in main')
            fx.line('    raise RuntimeError(f"The loss became nan or inf somewhere within steps "')
            fx.line(f"RuntimeError: The loss became nan or inf somewhere within steps [{step - 50}, {step}]")
            break
    meta = dict(writer="big_vision (Google)", step_key="step", loss_key="training_loss", events=[{"kind": "nonfinite", "step": 2600}],
                notes="One absl line per metric: 'I0314 ... utils.py:1096] \\x1b[35m[STEP]\\x1b[0m training_loss = 4.123...' - the step sits in magenta ANSI "
                      "codes and the value is a float32 read back as a Python float (long repr). The run ends with the trainer's own "
                      "RuntimeError naming the step window [2550, 2600]; training_loss = nan is printed once, at 2600. Source line numbers in "
                      "the absl prefix and traceback are approximate.")
    return fx, meta


def render_open_clip() -> tuple[Fixture, dict]:
    """open_clip: 'Train Epoch: E [ n/N (p%)] Data (t): .. Batch (t): .., x/s, y/s/gpu LR: .. Logit Scale: .. Contrastive_loss: v (avg) Loss: v (avg)'."""
    rng, fx = random.Random(606), Fixture("open_clip__vitb32_laion.log")
    bs, world, per_epoch = 256, 8, 2_000_000
    nb = per_epoch // (bs * world)  # 976 batches per epoch
    digits = len(str(per_epoch))

    def log(sec: float, msg: str) -> None:
        fx.line(f"{ts(sec):%Y-%m-%d,%H:%M:%S} | INFO | root | {msg}")

    log(0, "Running in distributed mode with multiple processes. Device: cuda:0.Process (global: 0, local 0), total 8.")
    log(1, "Loaded ViT-B-32 model config.")
    log(4, "Model:")
    log(4, "Params:")
    for k, v in [("accum_freq", 1), ("batch_size", bs), ("epochs", 3), ("lr", 0.0005), ("precision", "amp"), ("warmup", 500)]:
        log(4, f"  {k}: {v}")
    log(30, "Start epoch 0")
    total_steps = 3 * nb
    curve = lm_curve(rng, total_steps, 8.2, 2.9, 420.0, 0.015)
    sec = 30.0
    for epoch in range(3):
        vals = []
        for bc in list(range(1, nb + 1, 100)) + ([nb] if (nb - 1) % 100 else []):
            g = epoch * nb + bc
            sec += 100 * 0.47
            val = curve[g - 1]
            vals.append(val)
            avg = sum(vals) / len(vals)
            lr = 5e-4 * min(1.0, g / 500) * 0.5 * (1 + math.cos(math.pi * g / total_steps))
            sps = bs * world / (0.47 + rng.gauss(0, 0.01))
            ls = 14.2857 + 10.0 * (1 - math.exp(-g / 900))
            n = bc * bs * world
            v = f"{val:#.5g}"
            log(sec, f"Train Epoch: {epoch} [{n:>{digits}}/{per_epoch} ({100.0 * bc / nb:.0f}%)] Data (t): {0.012 + rng.random() * 0.01:.3f} "
                     f"Batch (t): {0.47 + rng.gauss(0, 0.005):.3f}, {sps:#g}/s, {sps / world:#g}/s/gpu LR: {lr:5f} "
                     f"Logit Scale: {ls:.3f} Contrastive_loss: {v} ({avg:#.5g}) Loss: {v} ({avg:#.5g})")
            fx.point(g, v)
        log(sec + 2, "Starting zero-shot imagenet.")
        log(sec + 60, "Finished zero-shot imagenet.")
        t1 = 0.05 + 0.12 * epoch + rng.random() * 0.01
        log(sec + 60, f"Eval Epoch: {epoch + 1} imagenet-zeroshot-val-top1: {t1:.4f}\timagenet-zeroshot-val-top5: {min(0.99, t1 * 2.6):.4f}")
        if epoch < 2:
            log(sec + 61, f"Start epoch {epoch + 1}")
    meta = dict(writer="open_clip", step_key="epoch*batch", loss_key="Loss", events=[],
                notes=f"No step counter is printed: a record shows 'Train Epoch: E [samples/2000000 (p%)]' (samples = batches x 256 x 8, right-aligned in "
                      f"7 columns); steps here are the global batch index epoch*{nb} + batch (logged at batch 1, 101, ..., {nb}). Each loss is printed "
                      "as 'value (running mean since the epoch began)'; the mean restarts every epoch. 'Contrastive_loss' and 'Loss' are equal for plain CLIP. "
                      "Start-up and zero-shot lines are approximate.")
    return fx, meta


def render_x_transformers() -> tuple[Fixture, dict]:
    """x-transformers enwik8 example: 'training loss: X' per iteration on stdout, tqdm '\\r' redraws on stderr."""
    rng, fx = random.Random(707), Fixture("x_transformers__enwik8_divergence.log")
    n, div_at = 3000, 2200
    curve = lm_curve(rng, n, 5.55, 1.35, 160.0, 0.03)
    for i in range(div_at, n):  # slow then accelerating climb: the run diverges
        curve[i] *= 1 + 1.9 * ((i - div_at) / (n - div_at)) ** 1.4
    prime = "the [[Commonwealth of Independent States]], the former Soviet republics. In [[1991]] the country declared "
    fx.raw("training:   0%|          | 0/100000 [00:00<?, ?it/s]")
    for i in range(n):
        if i and i % 41 == 0:
            el = int(i * 0.244)
            pct = 100 * i / 100000
            fx.raw(f"\rtraining:   {pct:.0f}%|{'▏' if pct >= 1 else ' '}         | {i}/100000 [{el // 60:02d}:{el % 60:02d}<{int((100000 - i) * 0.244) // 3600}:{int((100000 - i) * 0.244) % 3600 // 60:02d}:00,  4.10it/s]")
        v = repr(f32(curve[i]))
        fx.line(f"training loss: {v}")
        fx.point(i + 1, v)
        if i % 100 == 0:
            fx.line(f"validation loss: {f32(curve[i] * 1.04)!r}")
        if i % 500 == 0:
            fx.line(f"%s \n\n %s ('{prime}', '{'*' * 100}')")
            fx.line("".join(rng.choice("etaoin shrdlu[]'.") for _ in range(180)))
    meta = dict(writer="x-transformers enwik8 example", step_key="order", loss_key="training loss", events=[{"kind": "divergence", "step": 2201}],
                notes="One 'training loss: <float32 repr>' line per iteration with no step number (step = order, 1-based); 'validation loss:' every 100 "
                      "iterations is a different series. tqdm writes '\\rtraining:  N%|...| i/100000 [...]' to stderr without newlines, so in the "
                      "captured file bar fragments sit at the start of loss lines. Every 500 iterations the script prints a prime/sample "
                      "(its odd print(f'%s ...', tuple) is kept; the text is shortened and synthetic). Loss climbs steadily from iteration 2201.")
    return fx, meta


def render_kohya() -> tuple[Fixture, dict]:
    """kohya sd-scripts train_network.py: rich INFO lines, 'epoch E/N', and a tqdm 'steps' bar with avr_loss."""
    rng, fx = random.Random(808), Fixture("kohya_sd_scripts__lora.log")

    def info(sec: float, msg: str, where: str) -> None:
        fx.line(f"{ts(sec):%Y-%m-%d %H:%M:%S} INFO     {msg:<66} {where}")

    info(0, "Loading settings from /content/lora/config.toml...", "train_util.py:4174")
    info(3, "prepare tokenizer", "train_util.py:4680")
    info(9, "loading model for process 0/1", "train_util.py:4917")
    info(21, "create LoRA network. base dim (rank): 16, alpha: 8", "lora.py:935")
    info(22, "create LoRA for Text Encoder: 72 modules.", "lora.py:1032")
    info(22, "create LoRA for U-Net: 192 modules.", "lora.py:1040")
    steps_per_epoch, epochs = 200, 8
    fx.line("running training / 学習開始")
    fx.line("  num train images * repeats / 学習画像の数×繰り返し回数: 400")
    fx.line("  num reg images / 正則化画像の数: 0")
    fx.line(f"  num batches per epoch / 1epochのバッチ数: {steps_per_epoch}")
    fx.line(f"  num epochs / epoch数: {epochs}")
    fx.line("  batch size per device / バッチサイズ: 2")
    fx.line("  gradient accumulation steps / 勾配を合計するステップ数 = 1")
    fx.line(f"  total optimization steps / 学習ステップ数: {steps_per_epoch * epochs}")
    total = steps_per_epoch * epochs
    fx.raw(f"steps:   0%|          | 0/{total} [00:00<?, ?it/s]")
    per_step: list[list[float]] = [[] for _ in range(steps_per_epoch)]
    g = 0
    for ep in range(epochs):
        fx.line(f"\nepoch {ep + 1}/{epochs}")
        info(25 + g * 1.21, f"epoch is incremented. current_epoch: {ep}, epoch: {ep + 1}", "train_util.py:715")
        for s in range(steps_per_epoch):
            g += 1
            loss = max(0.004, 0.105 - 0.01 * ep / epochs + rng.gauss(0, 0.045))
            per_step[s].append(loss)
            recent = [per_step[k][-1] for k in range(steps_per_epoch) if per_step[k]]
            avr = sum(recent) / len(recent)  # moving average over the last epoch's steps
            el, rem = int(g * 1.21), int((total - g) * 1.21)
            pct = 100 * g / total
            fill = int(pct / 10)
            bar = "█" * fill + " " * (10 - fill)
            fx.raw(f"\rsteps: {pct:3.0f}%|{bar}| {g}/{total} [{el // 60:02d}:{el % 60:02d}<{rem // 60:02d}:{rem % 60:02d},  1.21s/it, avr_loss={avr:.4g}]")
            fx.point(g, f"{avr:.4g}")
        fx.line(f"\nsaving checkpoint: /content/lora/output/lora-{ep + 1:06d}.safetensors")
    fx.line("")
    meta = dict(writer="kohya-ss sd-scripts (train_network.py)", step_key="step", loss_key="avr_loss", events=[],
                notes="The loss exists only in the tqdm postfix 'avr_loss=0.1023' of the 'steps' bar, redrawn with '\\r' once per optimizer step "
                      "(one 'line' per epoch, 200 records each); the bar counter n/1600 is the global step. avr_loss is a moving average of the last "
                      "epoch's per-step losses (noisy diffusion loss, no trend). Rich-handler INFO lines carry the source file at the right edge; "
                      "Japanese/English 'running training' banner as train_network.py prints it. Column padding of the INFO lines is approximate.")
    return fx, meta


def render_k_diffusion() -> tuple[Fixture, dict]:
    """k-diffusion: tqdm(train_dl) redraws plus 'Epoch: E, step: S, loss: X' every 25 steps via tqdm.write."""
    rng, fx = random.Random(909), Fixture("k_diffusion__cifar10.log")
    fx.line("Parameters: 35,746,307")
    per_epoch, total = 391, 2400
    step, ep, bar_len = 0, 0, 0
    ema = None
    while step < total:
        for b in range(per_epoch):
            if step >= total:
                break
            if b % 7 == 0:
                bar = f"{100 * b / per_epoch:3.0f}%|{'█' * int(10 * b / per_epoch):<10}| {b}/{per_epoch} [00:{b // 9 % 60:02d}<00:{(per_epoch - b) // 9 % 60:02d},  9.02it/s]"
                fx.raw("\r" + bar)
                bar_len = len(bar)
            if step % 25 == 0:
                level = 0.62 + 0.55 * math.exp(-step / 300)
                loss = level * (1 + rng.gauss(0, 0.06 if step else 0.0))
                ema = loss if ema is None else ema
                v = f"{loss:g}"
                fx.raw("\r" + " " * bar_len + "\r" + f"Epoch: {ep}, step: {step}, loss: {v}\n")
                fx.point(step, v)
            if step > 0 and step % 1000 == 0:
                fx.raw("\r" + " " * bar_len + "\r" + f"Saving to cifar10_{step:08}.pth...\n")
            step += 1
        fx.raw("\n")
        ep += 1
    meta = dict(writer="k-diffusion (crowsonkb)", step_key="step", loss_key="loss", events=[],
                notes="'Epoch: E, step: S, loss: X' (loss = mean of the last 25 per-step losses, printed with :g, so 6 significant digits "
                      "or fewer) written through tqdm.write between '\\r' redraws of an unlabeled per-epoch tqdm bar (391 batches); the step counter is "
                      "global and does not reset with the epoch. 'Saving to NAME_00001000.pth...' every 1000 steps. Diffusion loss: noisy plateau, no event. "
                      "The parameter-count start-up line and the tqdm clearing are approximate.")
    return fx, meta


def render_fastai() -> tuple[Fixture, dict]:
    """fastai fine_tune on a non-tty console: two fastprogress tables (frozen epoch, then unfrozen epochs)."""
    rng, fx = random.Random(1010), Fixture("fastai__fine_tune_nan.log")
    names = ["epoch", "train_loss", "valid_loss", "accuracy", "time"]
    padded = [n + " " * (8 - len(n)) if len(n) < 8 else n for n in names]

    def row(vals: list[str]) -> None:
        fx.line("".join(t + " " * (2 + len(n) - len(t)) for t, n in zip(vals, padded)))

    order = 0
    for phase, n_ep in ((0, 1), (1, 10)):
        fx.line("  ".join(padded))
        for ep in range(n_ep):
            order += 1
            bad = phase == 1 and ep >= 7
            tl = float("nan") if bad else 1.35 * math.exp(-order / 3.2) + 0.18 + rng.gauss(0, 0.015)
            vl = float("nan") if bad else 0.95 * math.exp(-order / 3.0) + 0.24 + rng.gauss(0, 0.01)
            acc = 0.1 if bad else min(0.97, 0.72 + 0.22 * (1 - math.exp(-order / 2.5)) + rng.gauss(0, 0.004))
            t = f"{tl:.6f}"
            row([str(ep), t, f"{vl:.6f}", f"{acc:.6f}", f"00:{41 + rng.randint(0, 3):02d}"])
            fx.point(order, t)
    meta = dict(writer="fastai (fastprogress console table)", step_key="order", loss_key="train_loss",
                events=[{"kind": "nonfinite", "step": 9}],
                notes="No labels on the data rows: the header row 'epoch     train_loss  valid_loss  accuracy  time' names whitespace-aligned "
                      "columns. fine_tune prints two tables (1 frozen epoch, then 10 epochs) and the epoch column restarts at 0, so steps here are "
                      "the row order 1..11. From the 8th epoch of the second table (row 9) train_loss and valid_loss are 'nan' and accuracy falls "
                      "to chance (0.100000). Progress bars are not printed because stdout is not a tty.")
    return fx, meta


RENDERERS = [render_gpt_neox, render_picotron, render_lingua, render_easylm,
             render_big_vision, render_open_clip, render_x_transformers, render_kohya,
             render_k_diffusion, render_fastai]


def spot_checks(points: list[tuple[int, str]], events: list[dict]) -> dict:
    """A few step -> printed value pairs: first, middle, last finite, and each event step."""
    finite = [(s, p) for s, p in points if p.lower() != "nan"]
    want = {finite[0][0], finite[len(finite) // 2][0], finite[-1][0]}
    want |= {e["step"] for e in events if any(s == e["step"] and p.lower() != "nan" for s, p in points)}
    return {str(s): float(p) for s, p in points if s in want}


def write_corpus(renderers, sources: dict[str, str], out: Path, key=lambda name: name,
                 printed=lambda points: points) -> None:
    """Render every fixture into ``out`` and write its MANIFEST.json (shared by the held-out sets).

    ``key`` maps a renderer's name (``render_<key>``) to its entry in ``sources``; ``printed`` keeps
    the points whose printed value the manifest may spot-check.
    """
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for fn in renderers:
        fx, meta = fn()
        (out / fx.name).write_text(fx.text(), encoding="utf-8")
        steps = [s for s, _ in fx.points]
        entries.append({
            "file": fx.name, "writer": meta["writer"], "source": sources[key(fn.__name__.removeprefix("render_"))],
            "healthy": not meta["events"], "step_key": meta["step_key"], "loss_key": meta["loss_key"],
            "steps": {"first": steps[0], "last": steps[-1], "count": len(steps)},
            "loss_at": spot_checks(printed(fx.points), meta["events"]), "events": meta["events"],
            "notes": meta["notes"],
        })
    manifest = json.dumps({"version": 1, "entries": entries}, indent=1, ensure_ascii=False)
    (out / "MANIFEST.json").write_text(manifest + "\n")
    print(f"{len(entries)} fixtures -> {out}")


def main() -> None:
    """Render every fixture and write console/MANIFEST.json."""
    write_corpus(RENDERERS, SOURCES, OUT, key=lambda name: name.replace("kohya", "kohya_sd_scripts"))

if __name__ == "__main__":
    main()
