"""MosaicML Composer ``ConsoleLogger``: ``[batch=N/M]:`` then tab-indented ``Train name: value`` lines.

Format taken from github.com/mosaicml/composer @ 6405188805a0054b4551ec49e4919c54c971d0e8:
composer/loggers/console_logger.py ``_get_progress_string`` (``[batch={cur}/{total}]`` for a duration in batches,
``[epoch={e}][batch={b}/{n}]`` for a duration in epochs) and ``log_to_console`` (``{progress}:`` then
``\\n\\t {prefix}{name}: {value}`` with prefix ``Train `` / ``Eval ``), composer/loggers/logger.py
``format_log_data_value`` (floats ``{:.4f}``, ints ``str``); the metric names of llm-foundry runs
(``loss/train/total``, ``metrics/train/LanguageCrossEntropy``, ``time/batch``...).
"""

from __future__ import annotations

import math

from evals.console.curve import Event, EventKind
from evals.console.fixture import Run, Spec

SRC = "github.com/mosaicml/composer composer/loggers/console_logger.py + logger.py (6405188805a0054b4551ec49e4919c54c971d0e8)"


def composer(run: Run, epochs: bool = False) -> str:
    """Composer console (log_interval = spec.interval batches)."""
    per_epoch = 500
    out = ["******************************", "Config:", "composer_commit_hash: None", "composer_version: 0.28.0",
           "enabled_algorithms/GradientClipping: true", "node_name: unknown because NODENAME environment variable not set",
           "num_gpus_per_node: 8", "num_nodes: 1", "rank_zero_seed: 17", "******************************"]
    for i in range(run.n):
        b = run.steps[i]
        v = run.loss[i]
        if epochs:
            e, bi = (b - 1) // per_epoch, (b - 1) % per_epoch + 1
            prog = f"[epoch={e + 1}][batch={bi}/{per_epoch}]"
        else:
            bi = b
            prog = f"[batch={b}/{run.total}]"
        loss = run.show(i, f"{v:.4f}")
        data = [("time/batch", str(b)), ("time/sample", str(b * 256)), ("time/batch_in_epoch", str(bi)),
                ("time/sample_in_epoch", str(bi * 256)), ("time/token", str(b * 256 * 2048)),
                ("time/token_in_epoch", str(bi * 256 * 2048)), ("memory/current_allocated_mem", "14.3170"),
                ("memory/peak_allocated_mem", "51.2212"), ("trainer/device_train_microbatch_size", "8"),
                ("loss/train/total", loss), ("metrics/train/LanguageCrossEntropy", f"{v:.4f}"),
                ("metrics/train/LanguagePerplexity", f"{math.exp(min(v, 700)):.4f}" if math.isfinite(v) else "nan"),
                ("throughput/batches_per_sec", f"{0.41 + run.rng.uniform(-0.01, 0.01):.4f}"),
                ("time/train", f"{b * 2.4 / 3600:.4f}"), ("time/val", "0.0000"), ("time/total", f"{b * 2.4 / 3600:.4f}"),
                ("lr-DecoupledAdamW/group0", f"{run.lr(b, 6e-4):.4f}"), ("l2_norm/grad/global", f"{run.gnorm(i):.4f}")]
        out.append(f"{prog}:" + "".join(f"\n\t Train {k}: {val}" for k, val in data))
        if b % 1000 == 0:
            out.append("[Eval batch=1/25] Eval on eval data")
            out.append(f"[Eval batch=25/25] Eval on eval data:\n\t Eval metrics/eval/LanguageCrossEntropy: {v + 0.05:.4f}"
                       f"\n\t Eval metrics/eval/LanguagePerplexity: {math.exp(min(v + 0.05, 700)):.4f}" if math.isfinite(v) else
                       "[Eval batch=25/25] Eval on eval data:\n\t Eval metrics/eval/LanguageCrossEntropy: nan")
    return "\n".join(out) + "\n"


FIXTURES = [
    Spec("composer__healthy.log", "Composer", SRC, "batch", "loss/train/total", composer, points=90, interval=20,
         seed=901, notes="'[batch=N/M]:' then 18 tab-indented 'Train name: value' lines per record; 'time/batch' repeats N"),
    Spec("composer__epochs_nan.log", "Composer", SRC, "epoch*batch", "loss/train/total",
         lambda r: composer(r, epochs=True), points=90, interval=20, seed=902, events=(Event(EventKind.NONFINITE, 0.7),),
         notes="max_duration in epochs: '[epoch=E][batch=b/500]:'; the step is time/batch (global); loss nan from the onset"),
]
