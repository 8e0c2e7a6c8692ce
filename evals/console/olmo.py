"""AllenAI OLMo (v1) and OLMo-core consoles: a ``[step=N/M...]`` header and indented ``name=value`` lines.

Formats taken from:
- github.com/allenai/OLMo-core @ fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d: src/olmo_core/train/callbacks/console_logger.py
  (``[step={step}/{max_steps},epoch={epoch},eta={eta}]`` then ``    {name}={format_float(value)}`` for the metrics
  matching ``train/CE loss``, ``train/PPL``, ``optim/total grad norm``, ``optim/LR*``, ``throughput/*``...),
  src/olmo_core/utils.py ``format_float`` (``.3f`` for 1..10, ``.2f`` for 10..100, ``nan``), ``format_timedelta``
  and the log formatter ``%(asctime)s\\t%(hostname)s:%(local_rank)s\\t%(name)s:%(lineno)s\\t%(levelname)s\\t%(message)s``
  with ``%Y-%m-%d %H:%M:%S.mmm`` times.
- github.com/allenai/OLMo @ 59a53e3f68e546330ca5a99ec626e58f9ab96494: olmo/train.py ``log_metrics_to_console``
  (``[step={step}/{max_steps}]`` then ``    train/CrossEntropyLoss=...``, ``train/Perplexity``, ``throughput/*``,
  ``System/Peak GPU Memory (MB)``), ``raise ValueError("nan loss encountered")`` on a NaN loss, ``Saving
  checkpoint...``; olmo/util.py: the same tab-separated formatter.
"""

from __future__ import annotations

import math

from evals.console.curve import Event, EventKind
from evals.console.fixture import Clock, Run, Spec

CORE = "github.com/allenai/OLMo-core src/olmo_core/train/callbacks/console_logger.py + utils.py (fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d)"
V1 = "github.com/allenai/OLMo olmo/train.py log_metrics_to_console (59a53e3f68e546330ca5a99ec626e58f9ab96494)"


def ff(value: float) -> str:
    """OLMo-core's ``format_float`` for the magnitudes used here."""
    if math.isnan(value):
        return "nan"
    a = abs(value)
    if a == 0.0:
        return "0.0"
    if a < 0.0001:
        return f"{value:.2E}"
    if a >= 1000:
        return f"{int(value):,d}"
    if a > 100:
        return f"{value:.1f}"
    if a > 10:
        return f"{value:.2f}"
    if a > 1:
        return f"{value:.3f}"
    return f"{value:.4f}"


def _td(sec: float) -> str:
    sec = int(sec)
    d, sec = divmod(sec, 86400)
    h, sec = divmod(sec, 3600)
    m, s = divmod(sec, 60)
    parts = ([f"{d}d"] if d else []) + ([f"{h}h"] if h else []) + ([f"{m}m"] if m else []) + ([f"{s}s"] if s else [])
    return "".join(parts) or "0s"


def olmo_core(run: Run) -> str:
    """OLMo-core train script stdout (plain formatter, not rich)."""
    clock = Clock(run.rng)

    def log(name: str, ln: int, msg: str, dt: float = 0.05, level: str = "INFO") -> str:
        t = clock.tick(dt)
        return f"{t:%Y-%m-%d %H:%M:%S}.{t.microsecond // 1000:03d}\tjupiter-cs-aus-131:0\t{name}:{ln}\t{level}\t{msg}"

    out = [log("olmo_core.train.trainer", 540, "Checking for existing checkpoint in 's3://ai2-llm/checkpoints/OLMo-2-1B'..."),
           log("olmo_core.train.trainer", 560, "No checkpoint found, starting from scratch"),
           log("olmo_core.train.callbacks.gpu_memory_monitor", 95, "GPU memory monitor enabled"),
           log("olmo_core.train.trainer", 610, f"Training for {run.total:,d} steps")]
    for i in range(run.n):
        s = run.steps[i]
        v = run.loss[i]
        loss = run.show(i, ff(v))
        eta = _td((run.total - s) * 1.9)
        body = [f"    train/CE loss={loss}", f"    train/PPL={ff(math.exp(v)) if math.isfinite(v) else 'nan'}",
                f"    train/Z loss={ff(2e-4 * (1 + run.rng.uniform(-.1, .1)))}",
                f"    optim/total grad norm={ff(run.gnorm(i))}", f"    optim/step skipped={ff(0.0) if math.isfinite(v) else ff(1.0)}",
                f"    optim/LR (group 0)={ff(run.lr(s, 4e-4))}",
                f"    throughput/total tokens={ff(float(s * 4194304))}",
                f"    throughput/device/TPS={ff(28500.0 + run.rng.gauss(0, 200))}",
                f"    throughput/device/BPS={ff(0.0069 + run.rng.gauss(0, 0.0001))}"]
        out.append(log("olmo_core.train.callbacks.console_logger", 78,
                       f"[step={s}/{run.total},epoch=1,eta={eta}]\n" + "\n".join(body), 1.9 * run.spec.interval))
        if s % 1000 == 0:
            out.append(log("olmo_core.train.callbacks.checkpointer", 240, f"Saving checkpoint for step {s} to 's3://ai2-llm/checkpoints/OLMo-2-1B/step{s}'..."))
    return "\n".join(out) + "\n"


def olmo_v1(run: Run) -> str:
    """OLMo v1 train.py stdout; a NaN loss raises ``ValueError: nan loss encountered``."""
    clock = Clock(run.rng)

    def log(name: str, ln: int, msg: str, dt: float = 0.05, level: str = "INFO") -> str:
        t = clock.tick(dt)
        return f"{t:%Y-%m-%d %H:%M:%S}.{t.microsecond // 1000:03d}\tjupiter-cs-aus-204:0\t{name}:{ln}\t{level}\t{msg}"

    out = [log("olmo.train", 1180, "Pre-train system metrics"),
           log("olmo.train", 1190, "Starting training..."),
           log("olmo.train", 1195, "Starting training loop...")]
    tok = 0
    for i in range(run.n):
        s = run.steps[i]
        v = run.loss[i]
        if math.isnan(v):
            out.append(log("olmo.util", 162, "Uncaught ValueError: nan loss encountered", level="CRITICAL"))
            out += ["Traceback (most recent call last):", '  File "/opt/OLMo/scripts/train.py", line 345, in <module>',
                    "    main(cfg)", '  File "/opt/OLMo/olmo/train.py", line 1229, in fit',
                    "    metrics = self.train_step(batch, reduce_global_loss=should_log_this_step)",
                    '  File "/opt/OLMo/olmo/train.py", line 892, in train_step', '    raise ValueError("nan loss encountered")',
                    "ValueError: nan loss encountered"]
            run.crash(s)
            break
        tok += 4194304 * run.spec.interval
        loss = run.show(i, ff(v))
        body = [f"    train/CrossEntropyLoss={loss}", f"    train/Perplexity={ff(math.exp(v))}",
                f"    throughput/total_tokens={tok:,d}", f"    throughput/device/tokens_per_second={ff(9211.0 + run.rng.gauss(0, 50))}",
                f"    throughput/device/batches_per_second={ff(0.0022)}", f"    optim/total_grad_norm={ff(run.gnorm(i))}",
                f"    System/Peak GPU Memory (MB)={ff(61234.0)}"]
        out.append(log("olmo.train", 980, f"[step={s}/{run.total}]\n" + "\n".join(body), 2.1 * run.spec.interval))
        if s % 200 == 0:
            out.append(log("olmo.train", 1271, "Saving checkpoint..."))
            out.append(log("olmo.train", 1273, f"Checkpoint saved to /weka/checkpoints/OLMo-7B/step{s}", 30))
    return "\n".join(out) + "\n"


FIXTURES = [
    Spec("olmo_core__healthy.log", "OLMo-core", CORE, "step", "train/CE loss", olmo_core, points=150, interval=10,
         seed=801, notes="tab-separated logging prefix; '[step=N/M,epoch=1,eta=..]' header then indented 'name=value' "
                         "lines (records over several lines); train/PPL and train/Z loss also present"),
    Spec("olmo_core__spike_divergence.log", "OLMo-core", CORE, "step", "train/CE loss", olmo_core, points=150,
         interval=10, seed=802, events=(Event(EventKind.SPIKE, 0.3), Event(EventKind.DIVERGENCE, 0.8)),
         notes="spike then divergence"),
    Spec("olmo_v1__healthy.log", "OLMo", V1, "step", "train/CrossEntropyLoss", olmo_v1, points=120, interval=1, first=1,
         seed=804, notes="healthy; 'Saving checkpoint...' every 200 steps"),
    Spec("olmo_v1__nan_crash.log", "OLMo", V1, "step", "train/CrossEntropyLoss", olmo_v1, points=200, interval=1,
         first=1, seed=803, events=(Event(EventKind.NONFINITE, 0.85),),
         notes="console_log_interval 1; the NaN step is never printed: the run dies with 'ValueError: nan loss encountered' "
               "(no step in the message: it is the step after the last header)"),
]
