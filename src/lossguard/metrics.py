"""Canonical metric names and the aliases training frameworks write for them.

Every reader maps a raw column, tag or key through :func:`canonical_name`, so the rest of lossguard
only ever sees the constants below. Loss streams of a data mix keep their stream name:
``loss/cm4`` stays ``loss/cm4`` (see :func:`stream_of`).
"""
from __future__ import annotations

import re

LOSS = "loss"
"""Training loss (the language-model loss where the log has several)."""
VAL_LOSS = "val_loss"
"""Held-out / validation loss."""
GRAD_NORM = "grad_norm"
"""Global gradient norm before clipping."""
LR = "lr"
"""Learning rate."""
LOSS_SCALE = "loss_scale"
"""fp16 dynamic loss scale."""
SKIPPED_ITERS = "skipped_iters"
"""Iterations skipped in the logging interval (fp16 overflow, or the guard)."""
NAN_ITERS = "nan_iters"
"""Iterations whose loss or gradient was NaN in the logging interval."""
ITER_TIME = "iter_time"
"""Seconds per iteration."""
TOKENS = "tokens"
"""Tokens consumed so far."""
EPOCH = "epoch"
"""Epoch (fractional where the framework logs it so)."""

STREAM_SEPARATOR = "/"

# Raw names (lower-cased, with '-' and ' ' folded to '_') -> canonical name. Prefixes such as
# 'train/', 'train_' or 'trainer/' are stripped before the lookup (see _normalise).
_ALIASES: dict[str, str] = {
    "loss": LOSS, "lm_loss": LOSS, "train_loss": LOSS, "training_loss": LOSS, "trl": LOSS,
    "loss_step": LOSS, "train_loss_step": LOSS, "lm_loss_train": LOSS, "total_loss": LOSS,
    "reduced_train_loss": LOSS,
    "val_loss": VAL_LOSS, "eval_loss": VAL_LOSS, "validation_loss": VAL_LOSS, "valid_loss": VAL_LOSS,
    "lm_loss_validation": VAL_LOSS, "tel": VAL_LOSS, "test_loss": VAL_LOSS,
    "grad_norm": GRAD_NORM, "gradient_norm": GRAD_NORM, "grad_norm_total": GRAD_NORM,
    "global_grad_norm": GRAD_NORM, "total_grad_norm": GRAD_NORM, "norm": GRAD_NORM,
    "lr": LR, "learning_rate": LR, "lr_abs": LR,
    "loss_scale": LOSS_SCALE, "scale": LOSS_SCALE, "loss_scaler": LOSS_SCALE,
    "attempted_loss_scale": LOSS_SCALE, "grad_scale": LOSS_SCALE,
    "skipped_iters": SKIPPED_ITERS, "number_of_skipped_iterations": SKIPPED_ITERS,
    "skipped_iterations": SKIPPED_ITERS, "overflow_skips": SKIPPED_ITERS,
    "nan_iters": NAN_ITERS, "number_of_nan_iterations": NAN_ITERS, "nan_iterations": NAN_ITERS,
    "iter_time": ITER_TIME, "iteration_time_s": ITER_TIME, "elapsed_time_per_iteration": ITER_TIME,
    "step_time": ITER_TIME, "iteration_time": ITER_TIME,
    "tokens": TOKENS, "num_tokens": TOKENS, "consumed_tokens": TOKENS, "num_input_tokens_seen": TOKENS,
    "epoch": EPOCH,
}

_PREFIXES = ("train/", "train_", "training/", "trainer/", "metrics/", "optim/", "optimizer/")
_FOLD = re.compile(r"[\s\-]+")

STEP_ALIASES = ("step", "steps", "iteration", "iter", "global_step", "trainer/global_step",
                "train/global_step", "_step", "it", "s", "iterations", "consumed_steps", "current_steps")
"""Column or key names that hold the optimizer step (first match wins, in this order).

``current_steps`` is LLaMA-Factory's ``trainer_log.jsonl``. ``train/global_step`` (HF's ``WandbCallback``) comes
before W&B's ``_step``: ``_step`` counts ``wandb.log`` calls, and the Trainer logs eval results and its summary
as calls of their own."""

_GLOBAL_STEPS = frozenset({"step", "global_step", "trainer/global_step", "train/global_step", "_step"})

# Lightning's LearningRateMonitor: 'lr-<Optimizer>', 'lr-<Optimizer>-<i>' for a second optimizer
# of the same class, '/pg<N>' per parameter group; '-momentum' and '-weight_decay' are not the LR.
_LR_MONITOR = re.compile(r"^lr-(?P<opt>[A-Za-z_][\w.]*?)(?:-(?P<index>\d+))?(?:/pg(?P<group>\d+))?$")


def is_bookkeeping(raw: str) -> bool:
    """True for columns that count or time logging rather than measure training.

    W&B's own keys (``_step``, ``_runtime``, ``_timestamp``, ``_wandb``) and the global-step
    copies a framework logs beside its metrics (``train/global_step``) are never metrics; when one
    of them is the step column, the reader uses it as the step.
    """
    name = _normalise(raw)
    return name.startswith("_") or name in _GLOBAL_STEPS


def _normalise(raw: str) -> str:
    return _FOLD.sub("_", raw.strip().lower())


def canonical_name(raw: str) -> str:
    """Map a framework's metric name to lossguard's canonical one.

    Unknown names come back normalised but otherwise unchanged, so no column is ever dropped.
    Loss streams (``loss/<stream>`` or ``<stream>/loss``, e.g. ``train/loss/cm4``) become
    ``loss/<stream>``.

    >>> canonical_name("lm loss"), canonical_name("train/loss"), canonical_name("loss/cm4")
    ('loss', 'loss', 'loss/cm4')
    """
    name = _normalise(raw)
    if name in _ALIASES:
        return _ALIASES[name]
    monitor = _LR_MONITOR.match(raw.strip())
    if monitor is not None:
        # The first optimizer's first parameter group is the LR; other groups keep their names.
        first = monitor.group("index") is None and monitor.group("group") in (None, "1")
        return LR if first else name
    stripped = name
    for prefix in _PREFIXES:
        if stripped.startswith(prefix) and len(stripped) > len(prefix):
            stripped = stripped[len(prefix):]
            break
    if stripped in _ALIASES:
        return _ALIASES[stripped]
    parts = stripped.split(STREAM_SEPARATOR)
    if len(parts) == 2 and parts[0] in ("loss", "lm_loss") and parts[1]:
        return f"{LOSS}{STREAM_SEPARATOR}{parts[1]}"
    held_out = ("val", "eval", "valid", "validation", "test")
    if len(parts) == 2 and parts[1] in ("loss", "lm_loss") and parts[0] not in held_out:
        return f"{LOSS}{STREAM_SEPARATOR}{parts[0]}"
    if len(parts) == 2 and parts[0] in ("val", "eval", "valid", "validation", "test") and parts[1] == "loss":
        return VAL_LOSS
    return name


def is_step_name(raw: str) -> bool:
    """True when a column or key name holds the step index."""
    return _normalise(raw) in STEP_ALIASES


MAIN_METRICS = frozenset({VAL_LOSS, GRAD_NORM, LR, LOSS_SCALE})
"""Besides the losses (:func:`is_loss`), the metrics whose steps say where a launch is. The rest
(epoch, runtimes, Lightning's ``hp_metric`` placeholder at step 0) is logged at whatever step a
framework happens to be at, so it never decides a restart or a rollback point."""


def is_main(name: str) -> bool:
    """True for a canonical metric that places a launch on the step axis (see :data:`MAIN_METRICS`)."""
    return name in MAIN_METRICS or is_loss(name)


def stream_of(name: str) -> str | None:
    """The stream of a loss metric (``"cm4"`` for ``loss/cm4``), or None for anything else."""
    if name.startswith(LOSS + STREAM_SEPARATOR):
        return name[len(LOSS) + 1:]
    return None


def is_loss(name: str) -> bool:
    """True for the training loss and for every per-stream training loss."""
    return name == LOSS or stream_of(name) is not None


# ---------------------------------------------------------------- precursor statistics (issue 20)
ATTN_LOGIT_MAX = "attn_logit_max"
"""Largest pre-softmax attention logit ``q.k/sqrt(d)`` over all layers and heads of the step
(Wortsman et al. 2023: grows by orders of magnitude before a high-LR run stalls)."""
ATTN_LAYER_PREFIX = "attn_logit_max/"
"""Per-layer largest attention logit: ``attn_logit_max/<layer index>``."""
OUTPUT_LOGIT_MAX = "output_logit_max"
"""Largest ``|logit|`` of the output layer in the step."""
OUTPUT_LSE = "output_lse"
"""Mean log-partition ``log Z`` of the output softmax (what PaLM's z-loss holds near 0)."""
UPDATE_RATIO = "update_ratio"
"""Update-to-weight ratio ``||dtheta|| / ||theta||`` of the optimizer step."""
ADAM_V_RATIO = "adam_v_ratio"
"""``sum(g^2) / sum(v)``: the squared gradient against Adam's second moment (>> 1: a surprise)."""
PRECURSORS = (ATTN_LOGIT_MAX, OUTPUT_LOGIT_MAX, OUTPUT_LSE, UPDATE_RATIO, ADAM_V_RATIO)
"""The precursor metrics the analyser reads (the per-layer ones besides)."""


def attn_layer(i: int) -> str:
    """Metric name of layer ``i``'s largest attention logit."""
    return f"{ATTN_LAYER_PREFIX}{i}"
