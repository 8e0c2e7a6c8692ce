"""fairseq (json and simple log formats) and fairseq2 metric lines.

Formats taken from:
- github.com/facebookresearch/fairseq @ 3d262bb25690e4eb2e7d3c1309b1e9c406ca4b99: fairseq_cli/train.py logging format
  ``%(asctime)s | %(levelname)s | %(name)s | %(message)s`` and ``progress.log(stats, tag="train_inner",
  step=num_updates)`` (the logger is renamed to the tag, hence ``| INFO | train_inner |``); fairseq/logging/progress_bar.py
  ``JsonProgressBar`` (``json.dumps`` of ``epoch``, ``update`` and every stat through ``format_stat`` -> strings
  ``"{:g}"``) and ``SimpleProgressBar`` (``{prefix}:  {i:5d} / {size:d} k=v, k=v``, prefix ``epoch 001``;
  end-of-epoch ``{prefix} | k v | k v``); fairseq/trainer.py ``NOTE: gradient overflow detected, ignoring gradient,
  setting loss scale to: X``; fairseq/optim/dynamic_loss_scaler.py ``FloatingPointError: Minimum loss scale reached
  (0.0001). Your loss is probably exploding. ...``.
- github.com/facebookresearch/fairseq2 @ 027bdebca4b9177f1ac1df1cc981b9288465d68e: src/fairseq2/metrics/recorders/log.py
  (``{Title} Metrics (step {n}) - {Display Name}: {value} | ...`` sorted by priority), the display names and
  formatters of src/fairseq2/recipe/composition/metric_recorders.py (``NLL Loss`` via ``{:g}``, ``Gradient Norm``,
  ``Wall Time`` in seconds...), src/fairseq2/logging.py ``%(asctime)s %(levelname)s: %(name)s - %(message)s``.
"""

from __future__ import annotations

import json
import math

from evals.console.curve import Event, EventKind
from evals.console.fixture import Clock, Run, Spec

FS = ("github.com/facebookresearch/fairseq fairseq/logging/progress_bar.py + fairseq_cli/train.py + fairseq/trainer.py "
      "(3d262bb25690e4eb2e7d3c1309b1e9c406ca4b99)")
FS2 = ("github.com/facebookresearch/fairseq2 src/fairseq2/metrics/recorders/log.py + recipe/composition/metric_recorders.py "
       "(027bdebca4b9177f1ac1df1cc981b9288465d68e)")
PER_EPOCH = 1500


def _g(v: float) -> str:
    return f"{v:g}"


def _stats(run: Run, i: int, scale: float) -> dict[str, str]:
    v = run.loss[i]
    u = run.steps[i]
    r3 = (lambda x: _g(round(x, 3)) if math.isfinite(x) else "nan")
    return {"loss": r3(v), "nll_loss": r3(v / math.log(2) * 0.69), "ppl": _g(round(2 ** (v / math.log(2) * 0.69), 2)) if math.isfinite(v) else "nan",
            "wps": _g(round(23405.3 + run.rng.gauss(0, 150), 1)), "ups": "1.2", "wpb": _g(round(19584.6 + run.rng.gauss(0, 40), 1)),
            "bsz": "64", "num_updates": str(u), "lr": _g(run.lr(u, 5e-4)), "gnorm": r3(run.gnorm(i)), "loss_scale": _g(scale),
            "train_wall": str(int(84 + run.rng.uniform(-2, 2))), "gb_free": "10.2", "wall": str(int(u * 0.86))}


def fairseq(run: Run, fmt: str) -> str:
    """fairseq-train stdout in ``--log-format json`` or ``simple`` (``--log-interval`` = spec.interval)."""
    clock = Clock(run.rng)

    def log(name: str, msg: str, dt: float = 0.01, level: str = "INFO") -> str:
        return f"{clock.tick(dt):%Y-%m-%d %H:%M:%S} | {level} | {name} | {msg}"

    out = [log("fairseq_cli.train", "{'_name': None, 'common': {'_name': None, 'no_progress_bar': False, 'log_interval': "
               f"{run.spec.interval}, 'log_format': '{fmt}', 'fp16': True, ...}}}}"),
           log("fairseq_cli.train", "TransformerLanguageModel("), "  (decoder): TransformerDecoder(...)", ")",
           log("fairseq_cli.train", "task: LanguageModelingTask"), log("fairseq_cli.train", "model: TransformerLanguageModel"),
           log("fairseq_cli.train", "criterion: CrossEntropyCriterion"),
           log("fairseq_cli.train", "num. shared model params: 354,316,288 (num. trained: 354,316,288)"),
           log("fairseq.trainer", "begin training epoch 1"), log("fairseq_cli.train", "Start iterating over samples")]
    scale = 128.0
    collapse = next((j for k, j in run.onsets() if k is EventKind.LOSS_SCALE_COLLAPSE), None)
    epoch = 1
    for i in range(run.n):
        u = run.steps[i]
        e = (u - 1) // PER_EPOCH + 1
        if e != epoch:
            out.append(log("fairseq_cli.train", f"end of epoch {epoch} (average epoch stats below)"))
            st = _stats(run, i - 1, scale)
            st.pop("train_wall")
            st["num_updates"] = str(epoch * PER_EPOCH)
            if fmt == "json":
                out.append(log("train", json.dumps({"epoch": epoch, **{k: st[k] for k in ("loss", "nll_loss", "ppl", "wps", "ups", "wpb", "bsz", "num_updates", "lr", "gnorm", "loss_scale", "wall")}})))
            else:
                out.append(log("train", f"epoch {epoch:03d} | " + " | ".join(f"{k} {st[k]}" for k in ("loss", "nll_loss", "ppl", "wps", "ups", "wpb", "bsz", "num_updates", "lr", "gnorm", "loss_scale", "wall"))))
            out.append(log("fairseq.checkpoint_utils", f"Saved checkpoint checkpoints/checkpoint{epoch}.pt (epoch {epoch} @ {epoch * PER_EPOCH} updates, score {run.loss[i - 1] + 0.05:.3f}) (writing took 3.1 seconds)", 5))
            out.append(log("fairseq.trainer", f"begin training epoch {e}"))
            epoch = e
        if collapse is not None and i >= collapse:
            for _ in range(3):
                scale /= 2
                out.append(log("fairseq.trainer", f"NOTE: gradient overflow detected, ignoring gradient, setting loss scale to: {scale}", 1))
            if scale <= 0.0001 * 4:
                out += [log("fairseq.trainer", "NOTE: gradient overflow detected, ignoring gradient, setting loss scale to: 0.0001", 1),
                        "Traceback (most recent call last):", '  File "/opt/fairseq/fairseq/trainer.py", line 946, in train_step',
                        "    grad_norm = self.clip_grad_norm(self.cfg.optimization.clip_norm)",
                        '  File "/opt/fairseq/fairseq/optim/dynamic_loss_scaler.py", line 62, in check_overflow',
                        "    raise FloatingPointError(",
                        "FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding. Try lowering "
                        "the learning rate, using gradient clipping or increasing the batch size."]
                break
        elif run.rng.random() < 0.01:
            scale /= 2
            out.append(log("fairseq.trainer", f"NOTE: gradient overflow detected, ignoring gradient, setting loss scale to: {scale}", 1))
        elif i % 200 == 199:
            scale *= 2
        st = _stats(run, i, scale)
        run.show(i, st["loss"])
        clock.tick(0.86 * run.spec.interval)
        if fmt == "json":
            rec = {"epoch": e, "update": round(e - 1 + ((u - 1) % PER_EPOCH + 1) / PER_EPOCH, 3), **st}
            out.append(log("train_inner", json.dumps(rec), 0))
        else:
            out.append(log("train_inner", f"epoch {e:03d}:  {(u - 1) % PER_EPOCH + 1:5d} / {PER_EPOCH:d} "
                           + ", ".join(f"{k}={v}" for k, v in st.items()), 0))
    return "\n".join(out) + "\n"


def fairseq2(run: Run) -> str:
    """fairseq2 recipe stdout (no-rich formatter): one ``Train Metrics (step N)`` line per log interval."""
    clock = Clock(run.rng)

    def log(msg: str, dt: float = 0.01) -> str:
        return f"{clock.tick(dt):%Y-%m-%d %H:%M:%S} INFO: fairseq2 - {msg}"

    out = [log("Running on 8 process(es)."), log("Random seed set to 2."), log("Model: llama3_2_1b"),
           log("Training from scratch."), log("Training started.")]
    for i in range(run.n):
        s = run.steps[i]
        v = run.loss[i]
        loss = run.show(i, _g(v) if math.isfinite(v) else "nan")
        out.append(log(f"Train Metrics (step {s}) - NLL Loss: {loss} | Gradient Norm: {_g(run.gnorm(i))} | Data Epoch: 1 | "
                       f"Data Time: 0s | Compute Time: {int(8 + run.rng.uniform(-1, 1))}s | Lapse Time: 0s | Wall Time: {int(s * 0.8)}s | "
                       f"Learning Rate: {_g(run.lr(s, 3e-4))} | Elements per Batch: 262,144 | Elements per Second: "
                       f"{int(32768 + run.rng.gauss(0, 300)):,} | Number of Elements: {s * 262144:,}", 0.8 * run.spec.interval))
        if s % 1000 == 0:
            out.append(log(f"Validation Metrics (step {s}) - NLL Loss: {_g(v + 0.05)} | Wall Time: {int(s * 0.8)}s"))
            out.append(log(f"Saving checkpoint at step {s}."))
    out.append(log("Training finished."))
    return "\n".join(out) + "\n"


FIXTURES = [
    Spec("fairseq__json_healthy.log", "fairseq", FS, "num_updates", "loss", lambda r: fairseq(r, "json"), points=187,
         interval=10, seed=1001,
         notes="'| INFO | train_inner | {json}' with every value a string (\"loss\": \"3.412\"); epoch/update floats; "
               "end-of-epoch '| train |' json (epoch-average loss at the same num_updates as the last train_inner line: not a "
               "point) and checkpoint lines; occasional fp16 overflow NOTE lines are normal"),
    Spec("fairseq__json_spike.log", "fairseq", FS, "num_updates", "loss", lambda r: fairseq(r, "json"), points=187,
         interval=10, seed=1002, events=(Event(EventKind.SPIKE, 0.55),), notes="spike in the json format"),
    Spec("fairseq__simple_scale_collapse.log", "fairseq", FS, "num_updates", "loss", lambda r: fairseq(r, "simple"),
         points=300, interval=10, seed=1003, events=(Event(EventKind.DIVERGENCE, 0.7), Event(EventKind.LOSS_SCALE_COLLAPSE, 0.9)),
         notes="simple format 'epoch 001:    100 / 1500 loss=..., num_updates=100, ...' (the per-epoch counter is not the "
               "step: num_updates is); divergence, then overflow NOTE lines halve the loss scale until FloatingPointError"),
    Spec("fairseq2__healthy.log", "fairseq2", FS2, "step", "NLL Loss", fairseq2, points=187, interval=10, seed=1004,
         notes="'Train Metrics (step N) - NLL Loss: X | Gradient Norm: Y | ...' ({:g} values, thousands separators in counts)"),
    Spec("fairseq2__nan.log", "fairseq2", FS2, "step", "NLL Loss", fairseq2, points=187, interval=10, seed=1005,
         events=(Event(EventKind.NONFINITE, 0.6),), notes="NLL Loss: nan from the onset"),
]
