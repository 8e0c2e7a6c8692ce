"""Hugging Face Trainer consoles and the tools built on it: transformers, LLaMA-Factory, ms-swift.

Formats taken from:
- github.com/huggingface/transformers src/transformers/trainer_callback.py (@ 01081ce2c31e51fa3876e386c5aef784d38e958a
  and later): ``ProgressCallback`` draws ``tqdm(total=state.max_steps)`` (no desc) and ``on_log`` does
  ``training_bar.write(str(logs))`` (a Python dict repr; since v4.38 'epoch' is rounded to 2 digits, ``grad_norm``
  is present); ``PrinterCallback`` (disable_tqdm=True) just ``print(logs)``. trainer.py: ``'loss': round(tr_loss /
  steps, 4)``, the ``***** Running training *****`` banner (``Total optimization steps = N``), ``Saving model
  checkpoint to ...``, and the final ``{'train_runtime': ..., 'train_loss': ...}`` summary. Examples' explicit format
  ``[%(levelname)s|%(filename)s:%(lineno)s] %(asctime)s >> %(message)s`` (utils/logging.py enable_explicit_format).
- observed with transformers 5.24.0 on a tiny GPT-2 (stderr+stdout captured together): the bar is last drawn a step or
  more *before* the logging step, ``tqdm.write`` clears it (``\\r`` + spaces + ``\\r``), prints the dict, and the redraw
  right after the dict shows the logging step.
- transformers 5.24.0 (the release installed in this project's venv), src/transformers/trainer_callback.py:
  ``ProgressCallback.on_log`` and ``PrinterCallback.on_log`` now print every float as the string ``f"{v:.4g}"``
  (``{'loss': '2.346', 'grad_norm': '1.234', 'learning_rate': '4.5e-05', 'epoch': '0.05333'}``), trainer.py no
  longer rounds the loss or the epoch, and the banner gains ``Num update steps per epoch = N``.
- github.com/hiyouga/LLaMA-Factory @ ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30: src/llamafactory/train/callbacks.py
  ``LogCallback.on_log`` writes ``trainer_log.jsonl`` lines ``{"current_steps", "total_steps", "loss", "lr", "epoch",
  "percentage", "elapsed_time", "remaining_time"}`` (json.dumps); src/llamafactory/extras/logging.py
  ``[%(levelname)s|%(asctime)s] %(name)s:%(lineno)s >> %(message)s``.
- github.com/modelscope/ms-swift @ 3602360a562313afbf2ef6065fdf61f271a2c5b9: swift/trainers/patcher.py
  ``add_train_message`` adds ``'global_step/max_steps': 'N/M'``, ``'elapsed_time'``, ``'remaining_time'``
  (swift/utils/utils.py ``format_time``: ``4m 28s``), ``'memory(GiB)'``, ``'train_speed(s/it)'`` and rounds floats to 8
  digits; tqdm desc ``Train``.
- github.com/huggingface/trl @ f2cd57710ae345ea6428ae95363267fcf38a3dc8: trl/trainer/sft_trainer.py adds ``entropy``,
  ``num_tokens`` and ``mean_token_accuracy`` to each logged dict of the HF Trainer.
- github.com/axolotl-ai-cloud/axolotl @ 067b021c8b87a9e5e380b9173c704cf7340e30f5: src/axolotl/logging_config.py console
  format ``[%(asctime)s] [%(levelname)s] [%(name)s] %(message)s`` around the HF Trainer's bar and dicts.
"""

from __future__ import annotations

import json
import math
from datetime import datetime

from evals.console.curve import Event, EventKind
from evals.console.fixture import Clock, Run, Spec
from evals.console.text import TqdmStream, hms, log_ts

HF = "github.com/huggingface/transformers src/transformers/trainer_callback.py ProgressCallback/PrinterCallback + trainer.py (v4.4x; 01081ce2c31e51fa3876e386c5aef784d38e958a)"
LF = "github.com/hiyouga/LLaMA-Factory src/llamafactory/train/callbacks.py LogCallback (ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30)"
TRL = "github.com/huggingface/trl trl/trainer/sft_trainer.py (f2cd57710ae345ea6428ae95363267fcf38a3dc8) + " + HF
AXOLOTL = "github.com/axolotl-ai-cloud/axolotl src/axolotl/logging_config.py (067b021c8b87a9e5e380b9173c704cf7340e30f5) + " + HF
HF5 = ("transformers 5.24.0 (pip release) src/transformers/trainer_callback.py ProgressCallback.on_log/PrinterCallback.on_log "
       "+ trainer.py")
SWIFT = "github.com/modelscope/ms-swift swift/trainers/patcher.py add_train_message (3602360a562313afbf2ef6065fdf61f271a2c5b9)"


def _r(v: float, d: int) -> str:
    """A float as Python prints ``round(v, d)`` inside a dict (``nan`` stays ``nan``)."""
    return "nan" if math.isnan(v) else repr(round(v, d))


def _banner(clock: Clock, run: Run, per_device: int = 8, epochs: int = 3, v5: bool = False) -> list[str]:
    def info(line: int, msg: str) -> str:
        return f"[INFO|trainer.py:{line}] {log_ts(clock.tick(0.01))} >> {msg}"
    n_ex = run.total * per_device * 8 // epochs
    return [info(2243, "***** Running training *****"), info(2244, f"  Num examples = {n_ex:,}"),
            info(2245, f"  Num Epochs = {epochs}")] + ([info(1621, f"  Num update steps per epoch = {run.total // epochs:,}")]
                                                        if v5 else []) + [info(2246, f"  Instantaneous batch size per device = {per_device}"),
            info(2249, f"  Total train batch size (w. parallel, distributed & accumulation) = {per_device * 8}"),
            info(2250, "  Gradient Accumulation steps = 1"), info(2251, f"  Total optimization steps = {run.total:,}"),
            info(2252, "  Number of trainable parameters = 1,235,814,400")]


def swift_time(seconds: float) -> str:
    """ms-swift's ``format_time`` (swift/utils/utils.py): ``2s``, ``4m 28s``, ``1h 2m 3s``."""
    total = round(seconds)
    d, h, m, s = total // 86400, total % 86400 // 3600, total % 3600 // 60, total % 60
    if d:
        return f"{d}d {h}h {m}m {s}s"
    if h:
        return f"{h}h {m}m {s}s"
    return f"{m}m {s}s" if m else f"{s}s"


def _epoch(run: Run, step: int, epochs: int = 3) -> float:
    return round(epochs * step / run.total, 2)


def _v5(d: dict[str, object]) -> str:
    """transformers 5.x console dict: floats as ``f"{v:.4g}"`` strings."""
    return str({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in d.items()})


def hf_tqdm(run: Run, swift: bool = False, trl: bool = False, head_lines: list[str] | None = None,
            v5: bool = False) -> str:
    """transformers Trainer with its tqdm bar: dict lines written through the bar, every logging_steps."""
    clock = Clock(run.rng)
    head = _banner(clock, run, v5=v5)
    if swift:
        head = ["[INFO:swift] model_parameter_info: Qwen2ForCausalLM: 494.0328M Params (494.0328M Trainable [100.0000%]), "
                "0.0019M Buffers.", "[INFO:swift] The logging file will be saved in: output/v0-20260302-091405/logging.jsonl"] + head
    head = (head_lines or []) + head
    bar = TqdmStream(run.total, desc="Train" if swift else "", sec_per_it=0.62)
    iv = run.spec.interval
    k = 0
    for i in range(run.n):
        step = run.steps[i]
        while k < step - 1:  # the bar is drawn every few steps (mininterval), not at the logging step itself
            k += 1
            if k % max(1, iv // 2) == 0:
                bar.draw(k)
        k = step
        bar.advance(step)
        v = run.loss[i]
        if v5:
            run.show(i, f"{v:.4g}")
            bar.write(_v5({"loss": v, "grad_norm": run.gnorm(i), "learning_rate": run.lr(step, 2e-5),
                           "epoch": 3 * step / run.total}))
            if step % (iv * 50) == 0:
                bar.write(_v5({"eval_loss": v + 0.05, "eval_runtime": 41.2733, "eval_samples_per_second": 48.457,
                               "eval_steps_per_second": 0.775, "epoch": 3 * step / run.total}))
            continue
        loss = run.show(i, _r(v, 8 if swift else 4))
        logs = f"{{'loss': {loss}, 'grad_norm': {_r(run.gnorm(i), 8 if swift else 16)}, " \
               f"'learning_rate': {repr(round(run.lr(step, 2e-5), 8)) if swift else format(run.lr(step, 2e-5), '.6g')}"
        if trl:
            acc = max(0.05, min(0.95, 1.1 - v / 6)) if math.isfinite(v) else float("nan")
            logs += (f", 'entropy': {_r(0.8 * v, 16) if math.isfinite(v) else 'nan'}, 'num_tokens': {float(step * 65536)}, "
                     f"'mean_token_accuracy': {_r(acc, 16)}")
        logs += f", 'epoch': {_epoch(run, step)}"
        if swift:
            el = step * 0.62
            logs += (f", 'global_step/max_steps': '{step}/{run.total}', 'elapsed_time': '{swift_time(el)}', "
                     f"'remaining_time': '{swift_time((run.total - step) * 0.62)}', 'memory(GiB)': 17.43, "
                     f"'train_speed(s/it)': {round(el / step, 6)}")
        bar.write(logs + "}")
        if step % (iv * 50) == 0:
            bar.write(f"{{'eval_loss': {_r(v + 0.05, 16)}, 'eval_runtime': 41.2733, 'eval_samples_per_second': 48.457, "
                      f"'eval_steps_per_second': 0.775, 'epoch': {_epoch(run, step)}}}")
            bar.write(f"[INFO|trainer.py:3705] {log_ts(clock.tick(step))} >> Saving model checkpoint to "
                      f"output/checkpoint-{step}")
    bar.close()
    tail = (f"{{'train_runtime': {run.total * 0.62:.4f}, 'train_samples_per_second': 103.2, 'train_steps_per_second': "
            f"{1 / 0.62:.3f}, 'train_loss': {sum(x for x in run.loss if math.isfinite(x)) / run.n:.16g}, 'epoch': 3.0}}")
    return "\n".join(head) + "\n" + bar.text() + tail + "\n"


def axolotl(run: Run) -> str:
    """axolotl train: its concise logger lines, then the HF Trainer's bar and dicts."""
    clock = Clock(run.rng)
    ax = lambda name, msg: f"[{log_ts(clock.tick(0.3))}] [INFO] [{name}] {msg}"
    head = [ax("axolotl.utils.config", "cuda memory usage baseline: 0.000GB (+0.401GB misc)"),
            ax("axolotl.loaders.tokenizer", "EOS: 128009 / <|eot_id|>"),
            ax("axolotl.utils.data.sft", "Loading prepared dataset from disk at last_run_prepared/4ef0..."),
            ax("axolotl.utils.trainer", f"total_num_steps: {run.total}"),
            ax("axolotl.train", "Starting trainer...")]
    return hf_tqdm(run, head_lines=head)


def hf_printer_v5(run: Run) -> str:
    """transformers 5.x with disable_tqdm=True: PrinterCallback prints dicts of ``.4g`` strings; logging_steps is in the args dump."""
    clock = Clock(run.rng)
    iv = run.spec.interval
    out = [f"[INFO|trainer.py:812] {log_ts(clock.tick(0.01))} >> Using auto half precision backend",
           f"TrainingArguments(output_dir=out, max_steps={run.total}, logging_steps={iv}, disable_tqdm=True, bf16=True, ...)"]
    out += _banner(clock, run, v5=True)
    for i in range(run.n):
        step = run.steps[i]
        run.show(i, f"{run.loss[i]:.4g}")
        out.append(_v5({"loss": run.loss[i], "grad_norm": run.gnorm(i), "learning_rate": run.lr(step, 5e-5),
                        "epoch": 3 * step / run.total}))
    out.append(_v5({"train_runtime": 1873.2, "train_samples_per_second": 54.66, "train_steps_per_second": 1.708,
                    "train_loss": 3.117, "epoch": 3.0}))
    return "\n".join(out) + "\n"


def hf_printer(run: Run) -> str:
    """disable_tqdm=True: PrinterCallback's bare dicts; the step is only visible as logging_steps in the args dump."""
    clock = Clock(run.rng)
    iv = run.spec.interval
    out = [f"{datetime(2026, 3, 2, 9, 14, 5):%m/%d/%Y %H:%M:%S} - INFO - __main__ - Training/evaluation parameters "
           f"TrainingArguments(\n_n_gpu=1,\nbf16=True,\ndisable_tqdm=True,\neval_steps={iv * 50},\n"
           f"eval_strategy=steps,\ngradient_accumulation_steps=4,\nlearning_rate=5e-05,\nlogging_first_step=False,\n"
           f"logging_steps={iv},\nlogging_strategy=steps,\nlr_scheduler_type=cosine,\nmax_steps={run.total},\n"
           f"num_train_epochs=3.0,\noutput_dir=out,\nper_device_train_batch_size=8,\nsave_steps={iv * 50},\nseed=42,\n"
           f"warmup_ratio=0.02,\n)"]
    out += _banner(clock, run)
    for i in range(run.n):
        step = run.steps[i]
        loss = run.show(i, _r(run.loss[i], 4))
        out.append(f"{{'loss': {loss}, 'grad_norm': {_r(run.gnorm(i), 16)}, 'learning_rate': {run.lr(step, 5e-5):.6g}, "
                   f"'epoch': {_epoch(run, step)}}}")
        if step % (iv * 50) == 0:
            out.append(f"{{'eval_loss': {_r(run.loss[i] + 0.05, 16)}, 'eval_runtime': 12.0311, "
                       f"'eval_samples_per_second': 83.118, 'eval_steps_per_second': 10.39, 'epoch': {_epoch(run, step)}}}")
    return "\n".join(out) + "\n"


def llamafactory_jsonl(run: Run) -> str:
    """LLaMA-Factory's trainer_log.jsonl (one json.dumps line per on_log)."""
    out = []
    for i in range(run.n):
        step = run.steps[i]
        v = run.loss[i]
        run.show(i, _r(v, 4))
        el = step * 3.1
        rec = {"current_steps": step, "total_steps": run.total, "loss": round(v, 4) if math.isfinite(v) else v,
               "lr": run.lr(step, 1e-4), "epoch": _epoch(run, step), "percentage": round(step / run.total * 100, 2),
               "elapsed_time": f"{int(el // 3600)}:{hms(el % 3600)}", "remaining_time": f"{int((run.total - step) * 3.1 // 3600)}:"
               f"{hms((run.total - step) * 3.1 % 3600)}"}
        out.append(json.dumps(rec))
    return "\n".join(out) + "\n"


def llamafactory_console(run: Run) -> str:
    """LLaMA-Factory's console: its own logger lines, transformers' explicit-format lines, the HF bar and dicts."""
    clock = Clock(run.rng)
    lf = lambda name, ln, msg: f"[INFO|{clock.tick(0.2):%Y-%m-%d %H:%M:%S}] {name}:{ln} >> {msg}"
    head = [lf("llamafactory.hparams.parser", 406, "Process rank: 0, world size: 8, device: cuda:0, distributed "
               "training: True, compute dtype: torch.bfloat16"),
            lf("llamafactory.data.loader", 143, "Loading dataset identity.json..."),
            lf("llamafactory.model.model_utils.checkpointing", 143, "Gradient checkpointing enabled."),
            lf("llamafactory.model.adapter", 143, "Fine-tuning method: LoRA"),
            lf("llamafactory.model.loader", 143, "trainable params: 20,971,520 || all params: 8,051,232,768 || "
               "trainable%: 0.2605")]
    body = hf_tqdm(run)
    return "\n".join(head) + "\n" + body + "\n".join([
        "***** train metrics *****", "  epoch                    =        3.0", "  train_loss               =     2.8183",
        "Figure saved at: saves/llama3-8b/lora/sft/training_loss.png"]) + "\n"


FIXTURES = [
    Spec("hf_trainer__tqdm_healthy.log", "HF Trainer", HF, "global_step", "loss", hf_tqdm, points=165, interval=5,
         seed=501, notes="tqdm redraws (\\r) with dict lines written through the bar; the step is only the bar's N/M "
                         "before each dict; eval dicts every 250 steps; final dict has 'train_loss' (an average, no point)"),
    Spec("hf_trainer__tqdm_nan.log", "HF Trainer", HF, "global_step", "loss", hf_tqdm, points=165, interval=10,
         seed=502, events=(Event(EventKind.NONFINITE, 0.6),),
         notes="'loss': nan, 'grad_norm': nan from the onset on (HF keeps training and printing nan)"),
    Spec("hf_trainer__printer_logging_steps_spike.log", "HF Trainer", HF, "global_step", "loss", hf_printer,
         points=400, interval=25, seed=503, events=(Event(EventKind.SPIKE, 0.4),),
         notes="disable_tqdm: bare dict lines, no step in them; logging_steps=25 and max_steps are visible only in "
               "the multi-line TrainingArguments dump and the 'Total optimization steps' banner"),
    Spec("hf_trainer_v5__tqdm_spike.log", "HF Trainer", HF5, "global_step", "loss", lambda r: hf_tqdm(r, v5=True),
         points=160, interval=10, seed=511, events=(Event(EventKind.SPIKE, 0.45),),
         notes="transformers 5.x: every float in the dict is a quoted .4g string ('loss': '2.346'); step from the bar's N/M"),
    Spec("hf_trainer_v5__printer_nan.log", "HF Trainer", HF5, "global_step", "loss", hf_printer_v5, points=250,
         interval=20, seed=512, events=(Event(EventKind.NONFINITE, 0.7),),
         notes="transformers 5.x PrinterCallback: bare dicts of .4g strings, 'loss': 'nan' from the onset; logging_steps=20 "
               "only in the one-line TrainingArguments repr; the final dict's 'train_loss' is an average, not a point"),
    Spec("llamafactory__trainer_log.jsonl", "LLaMA-Factory", LF, "current_steps", "loss", llamafactory_jsonl,
         points=400, interval=5, seed=504, events=(Event(EventKind.DIVERGENCE, 0.65),),
         notes="trainer_log.jsonl: current_steps/total_steps, lr, epoch, percentage, elapsed/remaining time strings"),
    Spec("llamafactory__console_healthy.log", "LLaMA-Factory", LF + " + " + HF, "global_step", "loss",
         llamafactory_console, points=200, interval=10, seed=505,
         notes="LLaMA-Factory logger lines '[INFO|date] name:line >> msg' + transformers explicit format + HF tqdm/dicts; "
               "'***** train metrics *****' block at the end"),
    Spec("trl_sft__healthy.log", "trl", TRL, "global_step", "loss", lambda r: hf_tqdm(r, trl=True), points=150,
         interval=10, seed=508, notes="HF bar + dicts with trl's 'entropy', 'num_tokens', 'mean_token_accuracy' beside 'loss'"),
    Spec("axolotl__spike.log", "axolotl", AXOLOTL, "global_step", "loss", axolotl, points=150, interval=5, seed=509,
         events=(Event(EventKind.SPIKE, 0.6),),
         notes="axolotl '[date] [INFO] [axolotl.x] msg' lines ('total_num_steps: N') then the HF tqdm bar and dicts"),
    Spec("axolotl__healthy.log", "axolotl", AXOLOTL, "global_step", "loss", axolotl, points=120, interval=5, seed=510,
         notes="healthy"),
    Spec("ms_swift__healthy.log", "ms-swift", SWIFT + " + " + HF, "global_step", "loss",
         lambda r: hf_tqdm(r, swift=True), points=120, interval=5, seed=506,
         notes="dicts carry 'global_step/max_steps': 'N/M' as a string; tqdm desc 'Train'"),
    Spec("ms_swift__spike_level_shift.log", "ms-swift", SWIFT + " + " + HF, "global_step", "loss",
         lambda r: hf_tqdm(r, swift=True), points=120, interval=5, seed=507,
         events=(Event(EventKind.SPIKE, 0.3), Event(EventKind.LEVEL_SHIFT, 0.7)),
         notes="a spike that recovers and a later level shift"),
]
