"""Hugging Face Trainer consoles and the tools built on it: transformers, LLaMA-Factory, ms-swift.

Formats taken from:
- github.com/huggingface/transformers src/transformers/trainer_callback.py (@ 01081ce2c31e51fa3876e386c5aef784d38e958a
  and later): ``ProgressCallback`` draws ``tqdm(total=state.max_steps)`` (no desc) and ``on_log`` does
  ``training_bar.write(str(logs))`` (a Python dict repr; since v4.38 'epoch' is rounded to 2 digits, ``grad_norm``
  is present); ``PrinterCallback`` (disable_tqdm=True) just ``print(logs)``. trainer.py: ``'loss': round(tr_loss /
  steps, 4)``, the ``***** Running training *****`` banner (``Total optimization steps = N``), ``Saving model
  checkpoint to ...``, and the final ``{'train_runtime': ..., 'train_loss': ...}`` summary. Examples' explicit format
  ``[%(levelname)s|%(filename)s:%(lineno)s] %(asctime)s >> %(message)s`` (utils/logging.py enable_explicit_format).
- github.com/hiyouga/LLaMA-Factory @ ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30: src/llamafactory/train/callbacks.py
  ``LogCallback.on_log`` writes ``trainer_log.jsonl`` lines ``{"current_steps", "total_steps", "loss", "lr", "epoch",
  "percentage", "elapsed_time", "remaining_time"}`` (json.dumps); src/llamafactory/extras/logging.py
  ``[%(levelname)s|%(asctime)s] %(name)s:%(lineno)s >> %(message)s``.
- github.com/modelscope/ms-swift @ 3602360a562313afbf2ef6065fdf61f271a2c5b9: swift/trainers/patcher.py
  ``add_train_message`` adds ``'global_step/max_steps': 'N/M'``, ``'percentage'``, ``'elapsed_time'``,
  ``'remaining_time'``, ``'memory(GiB)'``, ``'train_speed(iter/s)'`` and rounds floats to 8 digits; tqdm desc ``Train``.
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
SWIFT = "github.com/modelscope/ms-swift swift/trainers/patcher.py add_train_message (3602360a562313afbf2ef6065fdf61f271a2c5b9)"


def _r(v: float, d: int) -> str:
    """A float as Python prints ``round(v, d)`` inside a dict (``nan`` stays ``nan``)."""
    return "nan" if math.isnan(v) else repr(round(v, d))


def _banner(clock: Clock, run: Run, per_device: int = 8, epochs: int = 3) -> list[str]:
    def info(line: int, msg: str) -> str:
        return f"[INFO|trainer.py:{line}] {log_ts(clock.tick(0.01))} >> {msg}"
    n_ex = run.total * per_device * 8 // epochs
    return [info(2243, "***** Running training *****"), info(2244, f"  Num examples = {n_ex:,}"),
            info(2245, f"  Num Epochs = {epochs}"), info(2246, f"  Instantaneous batch size per device = {per_device}"),
            info(2249, f"  Total train batch size (w. parallel, distributed & accumulation) = {per_device * 8}"),
            info(2250, "  Gradient Accumulation steps = 1"), info(2251, f"  Total optimization steps = {run.total:,}"),
            info(2252, "  Number of trainable parameters = 1,235,814,400")]


def _epoch(run: Run, step: int, epochs: int = 3) -> float:
    return round(epochs * step / run.total, 2)


def hf_tqdm(run: Run, swift: bool = False) -> str:
    """transformers Trainer with its tqdm bar: dict lines written through the bar, every logging_steps."""
    clock = Clock(run.rng)
    head = _banner(clock, run)
    if swift:
        head = [f"[INFO:swift] model_parameter_info: Qwen2ForCausalLM: 494.0328M Params (494.0328M Trainable [100.0000%]), "
                "0.0019M Buffers.", "[INFO:swift] The logging file will be saved in: output/v0-20260302-091405/logging.jsonl"] + head
    bar = TqdmStream(run.total, desc="Train" if swift else "", sec_per_it=0.62)
    iv = run.spec.interval
    k = 0
    for i in range(run.n):
        step = run.steps[i]
        while k < step:
            k += 1
            if k % max(1, iv // 2) == 0 or k == step:
                bar.draw(k)
        v = run.loss[i]
        loss = run.show(i, _r(v, 8 if swift else 4))
        logs = f"{{'loss': {loss}, 'grad_norm': {_r(run.gnorm(i), 8 if swift else 16)}, " \
               f"'learning_rate': {run.lr(step, 2e-5):.6g}, 'epoch': {_epoch(run, step)}"
        if swift:
            el = step * 0.62
            logs += (f", 'global_step/max_steps': '{step}/{run.total}', 'percentage': '{100 * step / run.total:.2f}%', "
                     f"'elapsed_time': '{int(el // 60)}m {int(el % 60)}s', 'remaining_time': "
                     f"'{int((run.total - step) * 0.62 // 60)}m {int((run.total - step) * 0.62 % 60)}s', "
                     f"'memory(GiB)': 17.43, 'train_speed(iter/s)': {round(1 / 0.62, 6)}")
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
    lf = lambda name, ln, msg: f"[INFO|{clock.tick(0.2):%Y-%m-%d %H:%M:%S}] {name}:{ln} >> {msg}"  # noqa: E731
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
    Spec("hf_trainer__tqdm_healthy.log", "HF Trainer", HF, "global_step", "loss", hf_tqdm, points=300, interval=5,
         seed=501, notes="tqdm redraws (\\r) with dict lines written through the bar; the step is only the bar's N/M "
                         "before each dict; eval dicts every 250 steps; final dict has 'train_loss' (an average, no point)"),
    Spec("hf_trainer__tqdm_nan.log", "HF Trainer", HF, "global_step", "loss", hf_tqdm, points=300, interval=10,
         seed=502, events=(Event(EventKind.NONFINITE, 0.6),),
         notes="'loss': nan, 'grad_norm': nan from the onset on (HF keeps training and printing nan)"),
    Spec("hf_trainer__printer_logging_steps_spike.log", "HF Trainer", HF, "global_step", "loss", hf_printer,
         points=400, interval=25, seed=503, events=(Event(EventKind.SPIKE, 0.4),),
         notes="disable_tqdm: bare dict lines, no step in them; logging_steps=25 and max_steps are visible only in "
               "the multi-line TrainingArguments dump and the 'Total optimization steps' banner"),
    Spec("llamafactory__trainer_log.jsonl", "LLaMA-Factory", LF, "current_steps", "loss", llamafactory_jsonl,
         points=400, interval=5, seed=504, events=(Event(EventKind.DIVERGENCE, 0.65),),
         notes="trainer_log.jsonl: current_steps/total_steps, lr, epoch, percentage, elapsed/remaining time strings"),
    Spec("llamafactory__console_healthy.log", "LLaMA-Factory", LF + " + " + HF, "global_step", "loss",
         llamafactory_console, points=300, interval=10, seed=505,
         notes="LLaMA-Factory logger lines '[INFO|date] name:line >> msg' + transformers explicit format + HF tqdm/dicts; "
               "'***** train metrics *****' block at the end"),
    Spec("ms_swift__healthy.log", "ms-swift", SWIFT + " + " + HF, "global_step", "loss",
         lambda r: hf_tqdm(r, swift=True), points=200, interval=5, seed=506,
         notes="dicts carry 'global_step/max_steps': 'N/M' as a string; tqdm desc 'Train'"),
    Spec("ms_swift__spike_level_shift.log", "ms-swift", SWIFT + " + " + HF, "global_step", "loss",
         lambda r: hf_tqdm(r, swift=True), points=200, interval=5, seed=507,
         events=(Event(EventKind.SPIKE, 0.3), Event(EventKind.LEVEL_SHIFT, 0.7)),
         notes="a spike that recovers and a later level shift"),
]
