"""Which column of the tables is the step and which the training loss, and why.

The loss is the best-ranked loss label (:func:`lossguard.io.text.names.loss_rank`) among the
tables that also carry a counter; only a perplexity gives ``log(ppl)``. The step is the best counter
of the loss's tables, checked to be whole numbers that increase: a global step, else an iteration,
else ``epoch x batches per epoch + batch`` (a batch counter that restarts at each epoch), else a
batch counter alone, else an epoch alone, else the order of the loss lines (with a warning).
``--step-key`` and ``--loss-key`` replace either choice; every choice records what else was there.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from .losses import counted_first, loss_candidates, ppl_labels
from .names import StepKind, fold
from .summary import summary_tables
from .guess import MIN_GUESS_ROWS, guessed_value, integral_increasing, only_value, strided_counter
from .records import Table
from .units import split_divisor


class StepRule(enum.Enum):
    """How the step of a row is computed."""

    LABEL = "label"
    """One counter column."""
    EPOCH_BATCH = "epoch*batch"
    """``(epoch - first epoch) x batches per epoch + batch``."""
    ORDER = "order"
    """The row's number among the loss rows (1, 2, 3, ...)."""


@dataclass
class Choice:
    """What was chosen, with the alternatives ``--explain`` lists.

    Attributes:
        loss: the loss label as printed (folded for matching).
        ppl: the loss is ``log`` of this perplexity label.
        rule: how the step is computed.
        step: the step label (``LABEL``), or (epoch label, batch label) for ``EPOCH_BATCH``.
        tables: the tables whose rows carry the step (the loss rows among them).
        other_losses: other loss-like labels seen, best first.
        other_steps: other counters of the loss rows, best first.
        warnings: what the choice had to guess.
    """

    loss: str
    ppl: bool
    rule: StepRule
    step: tuple[str, ...]
    tables: list[Table]
    other_losses: list[str] = field(default_factory=list)
    other_steps: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    per_step: int = 1
    """The step counter's units per step (``--step-key KEY/N``: samples per step, :mod:`.units`)."""


def choose(tables: list[Table], *, loss_key: str | None = None, step_key: str | None = None) -> Choice | None:
    """The loss and step of the tables, or None when no table holds a loss (or ``loss_key``)."""
    ppl = guessed = False
    step_key, per_step = split_divisor(step_key)
    others = [c[2] for c in loss_candidates(tables)]
    if loss_key is None and others and only_value(tables, bare=True) is not None:
        # A label on a line seen once or twice (prose: "... and the loss became nan") does not beat
        # a template that repeats with a counter: frequency outweighs a label match.
        others = [c[2] for c in loss_candidates(tables, min_rows=MIN_GUESS_ROWS)]
    if loss_key is None and len(others) > 1:
        others = counted_first(tables, others)
    if loss_key is not None:
        loss = _match(tables, loss_key)
        if loss is None:
            return None
    elif others:
        loss = others[0]
    else:
        ppls = ppl_labels(tables)
        if ppls:
            loss, ppl = ppls[0], True
        else:
            found = guessed_value(tables, bare=True)
            if found is None:
                return None
            (shape, loss), guessed = found, True
    others = [o for o in others if fold(o) != fold(loss)]
    with_loss = [t for t in tables if fold(loss) in {fold(lab) for lab in t.labels}]
    pool = tables
    if guessed and loss.startswith("#"):
        pool = [t for t in tables if t.labels == shape.labels]  # "#2" names a column of one shape only
        with_loss = [t for t in with_loss if t in pool]
    training = [t for t in with_loss if not t.template.evaluation]
    with_loss = training or with_loss  # an evaluation line printing the same label is not the training loss
    with_loss = [t for t in with_loss if t not in summary_tables(with_loss)] if loss_key is None else with_loss
    rule, step, steps_seen = _step(with_loss, step_key)
    dropped = 0
    if rule is not StepRule.ORDER:
        need = {fold(s) for s in step}
        tables_used = [t for t in pool if need <= {fold(lab) for lab in t.labels}
                       and (t in with_loss or not t.template.evaluation)]
        covered = sum(t.rows for t in with_loss if t in tables_used)
        total = sum(t.rows for t in with_loss)
        if step_key is None and covered * 2 < total:
            # A counter printed on a minority of the loss lines (a progress bar glued before some
            # of them) would drop the majority of records: number them all in order instead.
            dropped, rule, step = total - covered, StepRule.ORDER, ()
    if rule is StepRule.ORDER:
        tables_used = with_loss
    choice = Choice(loss=loss, ppl=ppl, rule=rule, step=step, tables=tables_used, other_losses=others,
                    other_steps=[s for s in steps_seen if (s,) != step and s not in step], per_step=per_step)
    if dropped:
        choice.warnings.append(f"the counter on some '{loss}' lines is missing from {dropped} of {total} of them: "
                               "every line is read in order instead")
    if rule is StepRule.LABEL and step_key is None and fold(step[0]) not in {fold(s) for s in steps_seen}:
        choice.warnings.append(f"no label names a step counter: '{step[0]}', a whole number that counts up by the "
                               "same amount on every loss line, is read as the step; pass --step-key to read another")
    if rule is StepRule.ORDER and step_key is None:
        choice.warnings.append(f"the lines with '{loss}' print no step counter: they are numbered 1, 2, 3, ... "
                               "in order; pass --step-key LABEL if a printed number is the step")
    if guessed and loss.startswith("#"):
        as_step = "" if rule is StepRule.ORDER else f" and column {step[0]}, a whole number that counts up, as the step"
        choice.warnings.append(f"no value is labelled as a loss: column {loss} (the only value, or the first column "
                               f"of fractions, of the most frequent line of bare numbers) is read as the loss"
                               f"{as_step}; "
                               "pass --loss-key '#N' / --step-key '#N' to read other columns")
    elif guessed:
        choice.warnings.append(f"no value is labelled as a loss: '{loss}', the only value (or the sum of others, "
                               "or the first that names no time, rate or accuracy) of the most frequent line, "
                               "is read as the loss; pass --loss-key LABEL to read another")
    if ppl:
        choice.warnings.append(f"no loss is printed, only the perplexity '{loss}': the loss is read as log({loss})")
    return choice


def _match(tables: list[Table], key: str) -> str | None:
    want = fold(key)
    for t in tables:
        for lab in t.labels:
            if fold(lab) == want:
                return lab
    return None


def _columns(tables: list[Table], *, own: bool = False) -> dict[str, tuple[StepKind, list[np.ndarray]]]:
    """Counter label -> (kind, its column in each loss table that has it); with ``own``, only the
    counters the loss lines print themselves (not those inherited from a record header)."""
    out: dict[str, tuple[StepKind, list[np.ndarray]]] = {}
    for t in tables:
        for j, (lab, kind) in enumerate(zip(t.labels, t.kinds, strict=True)):
            if own and j < t.inherited:
                continue
            if kind is None and lab.startswith("#") and integral_increasing(t.column(j)):
                kind = StepKind.BATCH  # a column of a headerless numeric line that counts up
            if kind is not None:
                out.setdefault(fold(lab), (kind, []))[1].append(t.column(j))
    return out


def _step(tables: list[Table], step_key: str | None) -> tuple[StepRule, tuple[str, ...], list[str]]:
    cols = _columns(tables)
    good = _good(cols)
    own = _good(_columns(tables, own=True))
    if own:
        # The loss lines' own counters first: a header's counter ("Saving checkpoint for step 1000")
        # is only the step of lines that print none (an epoch header still pairs with their batch).
        good = {lab: k for lab, k in good.items() if lab in own or k is StepKind.EPOCH}
    labels = {fold(lab): lab for t in tables for lab in t.labels}
    ranked = sorted(good, key=lambda lab: (good[lab], lab != "step"))
    seen = [labels.get(lab, lab) for lab in ranked]
    if step_key is not None:
        if fold(step_key) == "order":
            return StepRule.ORDER, (), seen
        if "*" in step_key:
            epoch, batch = (fold(p) for p in step_key.split("*", 1))
            return StepRule.EPOCH_BATCH, (labels.get(epoch, epoch), labels.get(batch, batch)), seen
        return StepRule.LABEL, (labels.get(fold(step_key), step_key),), seen
    best = [lab for lab in ranked if good[lab] in (StepKind.GLOBAL_STEP, StepKind.ITERATION)]
    if best:
        # A step printed on several loss lines (litgpt: two iterations per optimizer step) loses
        # points; an iteration counter that is new on every line keeps them all.
        # Of two counters of one kind, the one that never goes back: ParlAI's per-report 'updates'
        # (17, 19, 18, ...) beside its running 'total_train_updates'.
        best.sort(key=lambda lab: (good[lab], _restarts(cols[lab][1]) > 0))
        unique = [lab for lab in best if _unique(cols[lab][1])]
        return StepRule.LABEL, (labels[(unique or best)[0]],), seen
    epochs = [lab for lab, (k, _) in cols.items() if k is StepKind.EPOCH and _whole(cols[lab][1])]
    # An "Iter b/N" that starts again each epoch counts the batches of an epoch, whatever its name.
    batches = [lab for lab, (k, _) in cols.items() if _whole(cols[lab][1]) and (
        k is StepKind.BATCH or k is StepKind.ITERATION and lab not in good and _has_total(tables, lab))]
    if epochs and batches:
        if _at_total(tables, batches[0]):  # Keras' epoch-end "100/100 [====] - loss: ...": one row per epoch
            return StepRule.LABEL, (labels[epochs[0]],), seen
        if _restarts_each_epoch(tables, epochs[0], batches[0]):
            if _has_total(tables, batches[0]):  # "N/M": M batches per epoch
                return StepRule.EPOCH_BATCH, (labels[epochs[0]], labels[batches[0]]), seen
            return StepRule.ORDER, (), seen  # a per-epoch counter whose epoch length is not printed
        if batches[0] in good:  # one epoch in view: its batch counter is the step
            return StepRule.LABEL, (labels[batches[0]],), seen
    for kind in (StepKind.BATCH, StepKind.EPOCH):
        pick = [lab for lab in ranked if good[lab] is kind]
        if pick:
            # Of several batch counters, the one that never goes back and is new on every line (a
            # global count beside a per-epoch bar and an epoch number printed as bare "N|M|").
            pick.sort(key=lambda lab: (_restarts(cols[lab][1]), not _unique(cols[lab][1])))
            return StepRule.LABEL, (labels[pick[0]],), seen
    strided = strided_counter(tables)
    return (StepRule.LABEL, (strided,), seen) if strided is not None else (StepRule.ORDER, (), seen)


def _at_total(tables: list[Table], label: str) -> bool:
    """True when the counter ``label`` always shows its total (``100/100``): a summary row per epoch."""
    seen = False
    for t in tables:
        names = [fold(lab) for lab in t.labels]
        for j in t.totals:
            if names[j] == label:
                if not np.all(t.column(j) == t.totals[j]):
                    return False
                seen = True
    return seen


def _restarts(vs: list[np.ndarray]) -> int:
    """How often a counter goes back, over the loss tables that print it."""
    return int(sum(np.sum(np.diff(v) < 0) for v in vs))


def _unique(vs: list[np.ndarray]) -> bool:
    """True when a counter repeats on fewer than 1 in 10 consecutive loss lines."""
    d = np.concatenate([np.diff(v) for v in vs]) if vs else np.array([])
    return not len(d) or float(np.mean(d == 0)) < 0.1


def _good(cols: dict[str, tuple[StepKind, list[np.ndarray]]]) -> dict[str, StepKind]:
    """The counters whose values are whole numbers going up."""
    return {lab: kind for lab, (kind, vs) in cols.items() if all(integral_increasing(v) or len(v) == 1 for v in vs)
            or integral_increasing(np.concatenate(vs))}


def _has_total(tables: list[Table], label: str) -> bool:
    """True when the counter ``label`` is printed with its total (``N/M``) on some row."""
    for t in tables:
        names = [fold(lab) for lab in t.labels]
        if any(names[j] == label for j in t.totals):
            return True
    return False


def _whole(vs: list[np.ndarray]) -> bool:
    v = np.concatenate(vs)
    return bool(len(v)) and bool(np.all(np.isfinite(v))) and bool(np.all(v == np.round(v)))


def _restarts_each_epoch(tables: list[Table], epoch: str, batch: str) -> bool:
    """True when the batch counter goes back about as often as the epoch goes up (a per-epoch
    counter; the reset may show a line before the new epoch does, as Lightning's bar prints it)."""
    ups = resets = 0
    for t in tables:
        names = [fold(lab) for lab in t.labels]
        if epoch in names and batch in names:
            e = t.column(names.index(epoch))
            b = t.column(len(names) - 1 - names[::-1].index(batch))
            ups += int(np.sum(np.diff(e) > 0))
            resets += int(np.sum(np.diff(b) < 0))
    return ups > 0 and resets >= max(1, ups // 2)
