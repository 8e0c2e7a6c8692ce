"""JAX trainers logging through absl (MaxText, t5x via CLU, PaxML) and levanter's tqdm bar.

Formats taken from:
- github.com/AI-Hypercomputer/maxtext @ e591f30cbbf217ed67ef71263ec0538239f9c3b8: src/maxtext/common/metric_logger.py
  ``_log_training_metrics``: ``completed step: {step}, seconds: {:.3f}, TFLOP/s/device: {:.3f}, Tokens/s/device: {:.3f},
  total_weights: {n}, loss: {:.3f}, lm_loss: {:.3f}, perplexity: {:.3f}`` through src/maxtext/utils/max_logging.py
  (absl ``logging.info``).
- github.com/google-research/t5x @ cc342d419ec3e3e9c4bf1df33c82330cafdc1e16 t5x/trainer.py (``create_default_writer(...,
  collection=name)``) and github.com/google/CommonLoopUtils @ 04ad2f9edbd5c80f2307746d15a947fea43cb5e5
  clu/metric_writers/logging_writer.py ``write_scalars``: ``[%d] collection=train k=v, k=v`` (floats ``{:.6g}``,
  sorted keys) on absl; t5x/models.py metric names (``loss``, ``cross_ent_loss``, ``z_loss``, ``accuracy``, ``timing/*``).
- github.com/google/paxml @ b397693fb4dd7b49e90ae549105d024644a03665: paxml/programs.py ``steps/sec: %f`` and
  paxml/summary_utils.py ``Metrics values at step %d:`` / ``  loss=%f`` / ``  %s=%f (weight=%f)`` / ``Wrote summary
  entry at step `%d` (loss=`%f`).`` on absl.
- github.com/young-geng/EasyLM @ fe5b2c354e25d697fce7cd225e23bbbe72570da3: EasyLM/models/llama/llama_train.py
  (``trange(start_step, total_steps, ncols=0)`` and every log_freq steps ``tqdm.write("\\n" + pprint.pformat(log_metrics)
  + "\\n")`` of ``{"step", "loss", "accuracy", "learning_rate", "gradient_norm", "param_norm", ...}`` as numpy values).
- absl-py's prefix ``I%m%d %H:%M:%S.%f THREAD file.py:LINE] ``.
- github.com/stanford-crfm/levanter @ 9263f81e8b453241332c2c0b2d2001bfb2d2241c: src/levanter/callbacks/_metrics.py
  ``pbar_logger``: ``tqdm(desc="train")`` updated to the step with ``set_postfix(loss=...)`` (tqdm ``format_num``:
  3 significant digits).
"""

from __future__ import annotations

import math
import struct

from evals.console.curve import Event, EventKind
from evals.console.fixture import Clock, Run, Spec
from evals.console.text import TqdmStream, absl_prefix

MAXTEXT = "github.com/AI-Hypercomputer/maxtext src/maxtext/common/metric_logger.py (e591f30cbbf217ed67ef71263ec0538239f9c3b8)"
T5X = ("github.com/google-research/t5x t5x/trainer.py (cc342d419ec3e3e9c4bf1df33c82330cafdc1e16) + github.com/google/CommonLoopUtils "
       "clu/metric_writers/logging_writer.py (04ad2f9edbd5c80f2307746d15a947fea43cb5e5)")
PAX = "github.com/google/paxml paxml/summary_utils.py + paxml/programs.py (b397693fb4dd7b49e90ae549105d024644a03665)"
EASYLM = "github.com/young-geng/EasyLM EasyLM/models/llama/llama_train.py (fe5b2c354e25d697fce7cd225e23bbbe72570da3)"
LEVANTER = "github.com/stanford-crfm/levanter src/levanter/callbacks/_metrics.py pbar_logger (9263f81e8b453241332c2c0b2d2001bfb2d2241c)"


def maxtext(run: Run) -> str:
    """MaxText train.py stderr (absl): one ``completed step`` line per step."""
    clock = Clock(run.rng)
    p = lambda where, dt=0.01: absl_prefix(clock.tick(dt), where)
    out = [p("max_utils.py:773") + "System Information: Jax Version: 0.6.2", p("max_utils.py:774") + "System Information: Jaxlib Version: 0.6.2",
           p("train.py:389") + "Number of model params=8.030 billion", p("checkpointing.py:190") + "Creating checkpoint manager with ocdbt=True and zarr3=True",
           p("train.py:512") + "Loading model from scratch"]
    for i in range(run.n):
        s = run.steps[i]
        v = run.loss[i]
        loss = run.show(i, f"{v:.3f}")
        sec = 2.311 * (1 + run.rng.uniform(-0.01, 0.01))
        ppl = math.exp(v) if math.isfinite(v) else float("nan")
        out.append(p("metric_logger.py:218", sec * run.spec.interval) + f"completed step: {s}, seconds: {sec:.3f}, TFLOP/s/device: "
                   f"{402.1 * 2.311 / sec:.3f}, Tokens/s/device: {3545.2 * 2.311 / sec:.3f}, total_weights: 2097152, loss: {loss}, "
                   f"lm_loss: {loss}, perplexity: {ppl:.3f}")
        if s % 500 == 0:
            out.append(p("checkpointing.py:604") + f"Saving checkpoint for step {s}")
    return "\n".join(out) + "\n"


def t5x(run: Run) -> str:
    """t5x train.py output: CLU LoggingWriter lines ``[step] collection=train ...`` on absl."""
    clock = Clock(run.rng)
    p = lambda where, dt=0.01: absl_prefix(clock.tick(dt), where)
    out = [p("train.py:607") + f"Starting main loop over steps 0-{run.total}", p("train.py:679") + f"Training for {run.spec.interval} steps."]
    for i in range(run.n):
        s = run.steps[i]
        v = run.loss[i]
        z = 1.2e-4
        run.show(i, f"{v + z:.6g}")  # the CLU line below prints kv["loss"] with the same {:.6g}
        kv = {"accuracy": 0.62 - 0.01 * v, "cross_ent_loss": v, "cross_ent_loss_per_all_target_tokens": v * 0.0021,
              "learning_rate": run.lr(s, 1e-2), "learning_rate/current": run.lr(s, 1e-2), "loss": v + z,
              "nonpadding_fraction": 0.9712, "timing/seconds": 41.3 * (1 + run.rng.uniform(-.01, .01)), "timing/seqs": 2048 * run.spec.interval,
              "timing/seqs_per_second": 495.9, "timing/steps_per_second": 0.2421, "timing/target_tokens_per_second": 1015612.0, "z_loss": z}
        body = ", ".join(f"{k}={val:.6g}" if isinstance(val, float) else f"{k}={val}" for k, val in sorted(kv.items()))
        out.append(p("logging_writer.py:48", 41.3) + f"[{s}] collection=train {body}")
        if s % 1000 == 0:
            out.append(p("train.py:735") + "Saving checkpoint.")
            out.append(p("checkpoints.py:1096") + f"Saving checkpoint for step {s} to gs://bucket/t5x/checkpoint_{s}")
        if i + 1 < run.n:
            out.append(p("train.py:679") + f"Training for {run.spec.interval} steps.")
    return "\n".join(out) + "\n"


def paxml(run: Run) -> str:
    """PaxML main.py output (absl): ``Metrics values at step N:`` then indented ``loss=`` and weighted metrics."""
    clock = Clock(run.rng)
    p = lambda where, dt=0.001: absl_prefix(clock.tick(dt), where)
    out = [p("executors.py:341") + "Model initial global_step=0", p("programs.py:412") + "[PAX STATUS]: Starting training loop."]
    for i in range(run.n):
        s = run.steps[i]
        v = run.loss[i]
        loss = run.show(i, f"{v:f}")
        out.append(p("programs.py:515", 3.4 * run.spec.interval) + f"steps/sec: {0.2941 + run.rng.uniform(-.002, .002):f}")
        out.append(p("summary_utils.py:634") + f"Metrics values at step {s}:")
        out.append(p("summary_utils.py:635") + f"  loss={loss}")
        out.append(p("summary_utils.py:651") + f"  fraction_of_correct_next_step_preds={0.64 - 0.012 * v:f} (weight=1048576.000000)")
        out.append(p("summary_utils.py:651") + f"  log_pplx={v:f} (weight=1048576.000000)")
        out.append(p("summary_utils.py:676") + f"Wrote summary entry at step `{s}` (loss=`{v:f}`).")
    return "\n".join(out) + "\n"


def levanter(run: Run) -> str:
    """levanter's ``train`` tqdm bar (postfix loss with 3 significant digits) with log lines written through it."""
    head = ["INFO:levanter.distributed:Initializing distributed JAX", "INFO:levanter.trainer:Setting run id to ab12cd34",
            "INFO:levanter.main.train_lm:Total parameters: 1,412,427,776"]
    bar = TqdmStream(run.total, desc="train", sec_per_it=1.7)
    for i in range(run.n):
        s = run.steps[i]
        v = run.loss[i]
        txt = f"{v:.3g}".replace("+0", "+").replace("-0", "-")
        if len(str(v)) <= len(txt):
            txt = str(v)
        bar.draw(s, postfix=f"loss={run.show(i, txt)}")
        if s % 1000 == 0:
            bar.write(f"INFO:levanter.checkpoint:Saving checkpoint at step {s} to gs://bucket/levanter/checkpoints/run/step-{s}")
    bar.close()
    return "\n".join(head) + "\n" + bar.text()


def f32(v: float) -> str:
    """Shortest text that round-trips ``v`` as a float32 (what numpy prints for a float32 value)."""
    if not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    x = struct.unpack("f", struct.pack("f", v))[0]
    for p in range(1, 10):
        s = f"{x:.{p}g}"
        if struct.unpack("f", struct.pack("f", float(s)))[0] == x:
            return s if ("." in s or "e" in s or "n" in s) else s + "."
    return repr(x)


def _np(v: float) -> str:
    """A 0-d float32 numpy array's repr (``array(2.3456223, dtype=float32)``)."""
    return f"array({f32(v)}, dtype=float32)"


def easylm(run: Run) -> str:
    """EasyLM llama_train: a stats-only tqdm (ncols=0) and multi-line pprint'ed metric dicts written through it."""
    head = ["I0302 09:14:05.120000 140235871725376 checkpoint.py:142] Loading checkpoint from params::open_llama_3b",
            "Total params: 3,426,473,600"]
    parts = []
    elapsed = 0.0
    for i in range(run.n):
        s = run.steps[i]
        elapsed = s * 0.83
        v = run.loss[i]
        pct = 100 * s / run.total
        parts.append(f"\r{pct:3.0f}% {s}/{run.total} [{int(elapsed // 60):02d}:{int(elapsed % 60):02d}<{int((run.total - s) * .83 // 3600)}:"
                     f"{int((run.total - s) * .83 % 3600 // 60):02d}:{int((run.total - s) * .83 % 60):02d},  1.20it/s]")
        loss32 = float(f32(v))
        run.show(i, f32(v))
        d = "{'accuracy': " + _np(0.7 - 0.04 * loss32) + ",\n 'gradient_norm': " + _np(run.gnorm(i)) + \
            ",\n 'learning_rate': " + _np(run.lr(s, 3e-4)) + ",\n 'loss': " + _np(loss32) + \
            ",\n 'param_norm': " + _np(1834.2 + s * 0.01) + ",\n 'step': " + str(s) + "}"
        parts.append("\r" + " " * 40 + "\r\n" + d + "\n\n")
    parts.append("\n")
    return "\n".join(head) + "\n" + "".join(parts)


FIXTURES = [
    Spec("maxtext__healthy.log", "MaxText", MAXTEXT, "step", "loss", maxtext, points=262, interval=1, first=0, seed=1101,
         notes="absl prefix; 'completed step: N, seconds: .., loss: X, lm_loss: X, perplexity: ..' every step from step 0"),
    Spec("maxtext__spike.log", "MaxText", MAXTEXT, "step", "loss", maxtext, points=262, interval=1, first=0, seed=1102,
         events=(Event(EventKind.SPIKE, 0.4),), notes="spike; perplexity jumps with it"),
    Spec("t5x__healthy.log", "t5x", T5X, "step", "loss", t5x, points=112, interval=100, seed=1103,
         notes="CLU LoggingWriter '[N] collection=train k=v, ...' sorted keys: accuracy, cross_ent_loss, ..., loss, ..., z_loss "
               "(loss = cross_ent_loss + z_loss)"),
    Spec("t5x__divergence.log", "t5x", T5X, "step", "loss", t5x, points=112, interval=100, seed=1104,
         events=(Event(EventKind.DIVERGENCE, 0.6),), notes="divergence"),
    Spec("paxml__level_shift.log", "PaxML", PAX, "step", "loss", paxml, points=120, interval=100, seed=1105,
         events=(Event(EventKind.LEVEL_SHIFT, 0.5),),
         notes="records over several absl lines: 'Metrics values at step N:' then '  loss=X' and weighted metrics; "
               "'Wrote summary entry at step `N` (loss=`X`)' repeats the loss"),
    Spec("easylm__spike.log", "EasyLM", EASYLM, "step", "loss", easylm, points=200, interval=50, first=0, seed=1108,
         events=(Event(EventKind.SPIKE, 0.5),),
         notes="multi-line pprint dicts between blank lines: \"'loss': array(2.3456223, dtype=float32),\" and \"'step': N}\" on "
               "different lines; stats-only tqdm redraws (ncols=0) with \\r in between"),
    Spec("paxml__healthy.log", "PaxML", PAX, "step", "loss", paxml, points=80, interval=100, seed=1109, notes="healthy"),
    Spec("easylm__healthy.log", "EasyLM", EASYLM, "step", "loss", easylm, points=100, interval=50, first=0, seed=1110,
         notes="healthy"),
    Spec("levanter__healthy.log", "levanter", LEVANTER, "step", "loss", levanter, points=600, interval=5, seed=1106,
         notes="tqdm 'train' bar redrawn with \\r, postfix loss=2.34 (3 significant digits); step = bar's n"),
    Spec("levanter__nan.log", "levanter", LEVANTER, "step", "loss", levanter, points=600, interval=5, seed=1107,
         events=(Event(EventKind.NONFINITE, 0.75),), notes="loss=nan in the postfix from the onset"),
]
