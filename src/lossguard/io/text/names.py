"""What a printed label means: which counter it is (:class:`StepKind`) and how loss-like it is.

One definition for the reader, ``--explain`` and the error messages. The rankings record what
trainers print (see the corpus under ``tests/data/console``): a global step beats an iteration
counter, which beats an epoch with a per-epoch batch counter; the loss is the label a person would
call the training loss, ``loss`` first, then the names trainers give it.
"""
from __future__ import annotations

import enum
import re
from functools import lru_cache


class StepKind(enum.IntEnum):
    """A counter's kind, best first (the reader takes the best one a loss line carries); all truthy."""

    GLOBAL_STEP = 1
    """``step``, ``global_step``, ``num_updates``, ``current_steps``: the optimizer step."""
    ITERATION = 2
    """``iteration``, ``iter``, ``it``: one per optimizer step in every trainer that prints it."""
    BATCH = 3
    """``batch``, ``counter`` or an unlabelled ``N/M`` / leading ``N:`` counter: a step, or a batch of an epoch."""
    EPOCH = 4
    """``epoch`` (PaddlePaddle fluid: ``Pass``): with a per-epoch batch counter it gives ``epoch x batches + batch``."""


_FAMILIES = {
    StepKind.GLOBAL_STEP: ("step", "steps", "global_step", "global step", "globalstep", "train/global_step",
                           "trainer/global_step", "train step", "training step", "train_step", "optimizer step",
                           "opt step", "num_updates", "nupdates", "n_updates",
                           "updates", "update", "up", "upd", "current_steps", "global_steps",
                           "consumed_steps", "total_steps_done",
                           # reinforcement learning counts environment steps (SB3 and baselines log against them)
                           "total_timesteps", "num_timesteps", "timesteps", "timesteps_total"),
    StepKind.ITERATION: ("iteration", "iter", "it", "iters", "iterations", "itr", "train iter", "iteration_num"),
    StepKind.BATCH: ("", "counter", "batch", "batches", "batch_idx", "minibatch", "mini-batch", "batch_id"),
    StepKind.EPOCH: ("epoch", "ep", "epochs", "train epoch", "training epoch", "epoch_num", "pass"),
}
_KIND_OF = {name: kind for kind, names in _FAMILIES.items() for name in names}

_FOLD = re.compile(r"[\s\-]+")


def fold(label: str) -> str:
    """A label lower-cased with runs of space and ``-`` as one ``_`` (the form names are compared in)."""
    return _FOLD.sub("_", label.strip().lower())


@lru_cache(maxsize=4096)
def step_kind(label: str) -> StepKind | None:
    """The counter a label names, or None for a label that is no counter."""
    low = " ".join(label.lower().split()).rstrip(".")
    if "(" in low:  # "Epoch(train)", "iter (train)": the counter named before the phase
        low = low.split("(", 1)[0].strip() or low
    kind = _KIND_OF.get(low)
    if kind is None:
        kind = _KIND_OF.get(low.replace("_", " ")) or _KIND_OF.get(low.replace(" ", "_"))
    if kind is None and "/" in low and not low.endswith("/"):  # "time/iterations": a step under a group tag
        kind = _KIND_OF.get(low.rsplit("/", 1)[1].strip())
        if kind is not None and kind > StepKind.ITERATION:
            kind = None  # Composer's "time/batch", "time/epoch" are elapsed-time units, not its counters
    words = low.split()
    if kind is None and (len(words) == 2 or 2 < len(words) <= 4 and words[-2] in _LEADS):
        kind = _KIND_OF.get(words[-1])  # "completed step", "Train Epoch", "Metrics values at step"
    parts = low.split("_")
    if kind is None and 2 < len(parts) <= 4 and parts[0] in _TOTALS and all(p in _LEADS for p in parts[1:-1]):
        kind = _KIND_OF.get(parts[-1])  # "total_train_updates", "num_train_steps": a running count
        kind = kind if kind is not None and kind <= StepKind.ITERATION else None
    return kind


_TOTALS = frozenset({"total", "num", "n"})
_LEADS = frozenset({"at", "for", "of", "in", "after", "completed", "current", "global", "train", "training"})


# Loss labels in order of preference (folded). A label not listed but naming a loss ranks after them.
LOSS_NAMES = ("loss", "lm_loss", "train/loss", "train_loss", "train/lm_loss", "loss_train", "training_loss",
              "train/ce_loss", "ce_loss", "reduced_train_loss", "total_loss", "loss/train/total", "train/total_loss",
              "loss/loss", "train/loss/loss", "loss/total", "xent", "train/xent", "cross_entropy", "cross-entropy",
              "cross_entropy_loss", "crossentropy", "ce", "nll", "nll_loss", "cost", "closs", "objective", "avg_loss",
              "mean_loss", "running_loss", "loss_avg")
_LOSS_RANK = {fold(n): i for i, n in enumerate(LOSS_NAMES)}
_NOT_TRAIN = re.compile(r"(?:^|[/_\s.])(?:val|valid|validation|eval|evaluation|test|dev|aux|z|router|moe|balance|"
                        r"load_balancing|kl|reg|l2|weight|scale|scaler|ema|best|min|max|std)(?:$|[/_\s.])")
PPL_NAMES = ("ppl", "perplexity", "train/ppl", "train_ppl", "train_perplexity")
"""Labels of a perplexity: the only loss a log may print (its log is the loss)."""


_L_PREFIX = re.compile(r"l_[a-z]+(?:_[a-z]+)*$")
"""BasicSR and its descendants (Real-ESRGAN, Retinexformer, ...) name each loss ``l_pix``, ``l_percep``,
``l_g_gan``: a label ``l_<name>`` is a loss."""


@lru_cache(maxsize=4096)
def loss_rank(label: str) -> int | None:
    """How loss-like a label is (0 best), or None for a label that is not the training loss."""
    name = fold(label)
    if name in _LOSS_RANK:
        return _LOSS_RANK[name]
    if _NOT_TRAIN.search(name) or not (any(w in name for w in ("loss", "xent", "entropy")) or _L_PREFIX.match(name)):
        return None
    return len(LOSS_NAMES) + len(name)  # some other loss: the shorter (less qualified) name first


def is_ppl(label: str) -> bool:
    """True for a perplexity label."""
    return fold(label) in PPL_NAMES
