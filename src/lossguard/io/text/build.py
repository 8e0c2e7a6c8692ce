"""A :class:`~lossguard.io.text.choose.Choice` over the tables -> the points of a RunLog.

Each row's step is computed by the chosen rule; rows are put back in line order to find restarts
(a step lower than the one before starts a new segment, as in every other reader); within a
segment a step printed again (a redraw, a rank's copy, a line split over records) keeps its last
value. A non-finite loss named by a crash line becomes a NaN loss at that step (:mod:`.stop`). A
gradient norm is never negative: DeepSpeed prints ``-1`` when it found a NaN, read as NaN.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ...metrics import EPOCH, GRAD_NORM, LOSS, canonical_name
from .choose import Choice, StepRule
from .names import StepKind, fold
from .overflow import overflow_points
from .records import Scan, Table
from .rounded import restore
from .stop import crash_point
from .units import to_steps


_UNIT = re.compile(r"\s*\([^()]*\)?\s*$")


@dataclass
class Points:
    """The read points: per metric (segment, step, value, line) arrays, and segment notes."""

    metrics: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    notes: list[str]
    events: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def metric_name(label: str, loss: str) -> str | None:
    """The metric a label is stored as (the chosen loss is ``loss``; another loss keeps its label)."""
    if fold(label) == fold(loss):
        return LOSS
    label = _UNIT.sub("", label) or label  # "iter time (s)" -> "iter time"
    name = canonical_name(label)
    if name == LOSS:
        return fold(label) if fold(label) != LOSS else "loss_other"
    return name or None


def _steps(table: Table, choice: Choice) -> tuple[np.ndarray | None, list[int]]:
    """The step of each row and the columns that hold counters used for it."""
    names = [fold(lab) for lab in table.labels]

    def col(label: str) -> int:
        want = fold(label)
        return len(names) - 1 - names[::-1].index(want)  # the line's own counter over an inherited one

    if choice.rule is StepRule.LABEL:
        j = col(choice.step[0])
        return restore(table, j), [j]  # a step printed as "1e+4" from the exact counter beside it
    if choice.rule is StepRule.ORDER:
        return None, []
    e, b = col(choice.step[0]), col(choice.step[1])
    return np.stack([table.column(e), table.column(b)], axis=1), [e, b]


def build(scan: Scan, choice: Choice) -> Points:
    """The points of the chosen loss, step and every other metric of the same rows."""
    # (table, lines, raw step(s), used columns)
    parts: list[tuple[Table, np.ndarray, np.ndarray | None, list[int]]] = []
    places = []
    for t in choice.tables:
        lines = np.frombuffer(t.lines, dtype=np.int64)
        places.append(np.frombuffer(t.order, dtype=np.int64))
        if choice.rule is StepRule.ORDER:
            parts.append((t, lines, None, []))
            continue
        raw, used = _steps(t, choice)
        parts.append((t, lines, raw, used))
    all_lines = np.concatenate([p[1] for p in parts])
    order = np.argsort(np.concatenate(places), kind="stable")
    warnings: list[str] = []
    per_epoch = None
    if choice.rule is StepRule.ORDER:
        steps_all = np.empty(len(all_lines), dtype=np.int64)
        steps_all[order] = np.arange(1, len(all_lines) + 1)
    elif choice.rule is StepRule.EPOCH_BATCH:
        raw = np.concatenate([p[2] for p in parts])
        per_epoch = _per_epoch(parts, raw)
        # Epochs count from the first one in view (Keras' "Epoch 1/10", Lightning's "Epoch 0", a paste
        # that starts at epoch 147): steps are then those of the text, whatever the epoch base.
        raw = np.where(np.isfinite(raw), raw, -1)
        epoch0 = int(raw[:, 0].min())
        steps_all = ((raw[:, 0] - epoch0) * per_epoch + raw[:, 1]).astype(np.int64)
        warnings.append(f"step = ({choice.step[0]}{f' - {epoch0}' if epoch0 else ''}) x {per_epoch} batches "
                        f"per epoch + {choice.step[1] or 'the bar count'}")
        steps_all, said = to_steps(steps_all, choice.per_step, raw[order, 1])
        warnings += said
    else:
        raw = np.concatenate([p[2] for p in parts])
        ok = np.isfinite(raw)
        raw = np.where(ok, raw, -1)
        steps_all, said = to_steps(raw.astype(np.int64), choice.per_step, None)
        warnings += said
    seq = steps_all[order]
    breaks = np.flatnonzero(np.diff(seq) < 0) + 1
    notes = ["start of text"] + [f"step {int(seq[i])} after {int(seq[i - 1])} at line {int(all_lines[order][i])}"
                                 for i in breaks]
    if len(breaks) and choice.rule is not StepRule.ORDER:
        seq, runs = new_runs(seq, breaks, all_lines[order])
        steps_all[order] = seq
        warnings += runs
    seg_sorted = np.zeros(len(seq), dtype=np.int64)
    if len(breaks):
        seg_sorted[breaks] = 1
        seg_sorted = np.cumsum(seg_sorted)
    seg_all = np.empty_like(seg_sorted)
    seg_all[order] = seg_sorted
    # Rows of one rank only: where a table prints the rank, keep its lowest one.
    metrics: dict[str, list[tuple[np.ndarray, ...]]] = {}
    offset, first_wins = 0, False
    for (t, lines, _, used), place in zip(parts, places, strict=True):
        n = len(lines)
        steps, segs = steps_all[offset:offset + n], seg_all[offset:offset + n]
        offset += n
        keep = np.ones(n, dtype=bool)
        names = [fold(lab) for lab in t.labels]
        rank = _process_rank(t, names)
        if rank is not None:
            keep &= rank == np.nanmin(rank)
        keep &= steps >= 0
        bar = used[-1] if used and used[-1] in t.totals and t.labels[used[-1]] == "" else None
        if bar is not None and fold(choice.loss) in names:
            loss = t.column(names.index(fold(choice.loss)))
            count = t.column(bar)
            zero = count == 0
            same = np.zeros(n, dtype=bool)
            same[1:] = (loss[1:] == loss[:-1]) | (np.isnan(loss[1:]) & np.isnan(loss[:-1]))
            # Lightning resets its bar to 0/M, still showing the last postfix, before the next epoch:
            # a bar at 0 that repeats the loss of the row before it reports no step.
            keep &= ~(zero & same) if choice.rule is StepRule.EPOCH_BATCH else True
            redrawn = n > 1 and np.mean(count[1:] == count[:-1]) >= 0.25  # a bar drawn again at each count
            if redrawn and (zero & ~same & np.isfinite(loss)).any():
                # A new value drawn at count 0 (YOLOv5 sets the bar's description before tqdm counts the
                # batch): each value is drawn first at the count of the batches it covers, then again at
                # the next count with the next value. The first of each count is its value; 0 is none.
                keep &= ~zero
                first_wins = True
        # every row kept: views, no copies of million-row columns
        rows: np.ndarray | slice = slice(None) if keep.all() else keep
        for j, (lab, kind) in enumerate(zip(t.labels, t.kinds, strict=True)):
            if j in used or not lab or fold(lab) == "rank" and rank is not None:
                continue
            if kind is not None and kind is not StepKind.EPOCH:
                continue
            name = EPOCH if kind is StepKind.EPOCH else metric_name(lab, choice.loss)
            if name is None:
                continue
            values = t.column(j)
            if name == LOSS and choice.ppl:
                with np.errstate(divide="ignore", invalid="ignore"):
                    values = np.log(values)
            if name == GRAD_NORM:
                values = np.where(values < 0, np.nan, values)  # DeepSpeed's -1: no finite norm
            metrics.setdefault(name, []).append((segs[rows], steps[rows], values[rows], lines[rows], place[rows]))
    out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
    repeated = 0
    for name, chunks in metrics.items():
        if len(chunks) == 1:
            seg, step, val, line, place = chunks[0]  # one table: no copy
        else:
            seg, step, val, line, place = (np.concatenate([c[i] for c in chunks]) for i in range(5))
        if not len(step):
            continue  # every row of this metric dropped (no step, another rank): no series
        if len(chunks) > 1 or not (np.all(np.diff(step) > 0) and np.all(seg == seg[0])):
            idx = np.lexsort((place, step, seg))  # already in order in a plain run: no sort
            seg, step, val, line = seg[idx], step[idx], val[idx], line[idx]
        last = np.ones(len(step), dtype=bool)
        if first_wins:  # keep the first value of each step (see the bar at count 0 above)
            last[1:] = (seg[1:] != seg[:-1]) | (step[1:] != step[:-1])
        else:
            last[:-1] = (seg[1:] != seg[:-1]) | (step[1:] != step[:-1])
        if name == LOSS:
            same = ~last[:-1]
            repeated = int(np.sum(same & (val[:-1] != val[1:]) & ~(np.isnan(val[:-1]) & np.isnan(val[1:]))))
        # every step printed once (a plain run): the arrays as they are, no masked copies of 1M rows
        out[name] = (seg, step, val, line) if last.all() else (seg[last], step[last], val[last], line[last])
    if repeated:
        warnings.append(f"{repeated} loss line(s) repeat a step already printed with another value (progress-bar "
                        "redraws, several ranks, or records over several lines): the "
                        f"{'first' if first_wins else 'last'} value of each step is kept")
    points = Points(out, notes, warnings=warnings)
    stopped = crash_point(scan, choice, points.metrics[LOSS], per_epoch) if LOSS in points.metrics else None
    if stopped is not None:
        points.metrics[LOSS] = stopped[0]
        points.warnings.append(stopped[1])
    added, events = overflow_points(scan.overflows, points.metrics)
    points.metrics.update(added)
    points.events += events
    return points


def _process_rank(table: Table, names: list[str]) -> np.ndarray | None:
    """The ``rank`` column when it numbers processes (whole numbers); a fractional ``rank`` is a
    metric (a retrieval model's mean rank of the answer, ParlAI's ``'rank': 14.53``), not a rank."""
    if "rank" not in names:
        return None
    r = table.column(names.index("rank"))
    finite = r[np.isfinite(r)]
    return r if len(finite) and np.all(finite == np.round(finite)) else None


RETRACE = 3
"""Points after a return to the first step that must fall inside the run before for a new run."""


def new_runs(seq: np.ndarray, breaks: np.ndarray, lines: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Steps in text order with each new run moved after the run before it, and a warning per run.

    The rule for text (a paste, a console log): a counter that goes back to the *first* step of the
    run before (``step 1`` again, ``epoch 0`` again) starts a new run (the same script launched
    twice), not a rollback; both runs are read, one after the other, so an event in either is
    reported: the later run's steps are shifted to follow the earlier run by its logging interval
    (the warning gives the shift, to map a reported step back to the text). A counter that goes back
    to a step inside the previous range but not its first is a rollback (a resume from a
    checkpoint): the later points supersede the earlier ones, as in every other reader. A new run
    retraces the steps of the one before: a lone return to the first step (a progress bar reset to
    ``0/M`` before the next epoch) is not one.
    """
    seq = seq.copy()
    bounds = [0, *breaks.tolist(), len(seq)]
    warnings = []
    for k in range(1, len(bounds) - 1):
        prev, start, end = seq[bounds[k - 1]:bounds[k]], bounds[k], bounds[k + 1]
        want = min(RETRACE, len(prev) - 1)  # a short first run is retraced by fewer points (then may be passed)
        retrace = seq[start + 1:min(end, start + 1 + want)]
        if (seq[start] != prev[0] or len(prev) < 2 or len(retrace) < want
                or not np.all((retrace >= seq[start]) & (retrace <= prev.max())) or not retrace.max() > seq[start]):
            continue  # a new run retraces the steps of the one before (a bar reset to 0 jumps past them)
        gaps = np.diff(prev)
        gaps = gaps[gaps > 0]
        interval = int(np.median(gaps)) if len(gaps) else 1
        shift = int(prev.max()) + interval - int(seq[start])
        seq[start:] += shift  # later runs move with it; each is judged against the (shifted) run before
        warnings.append(f"line {int(lines[start])} starts a new run (the counter is back at its first value, "
                        f"{int(seq[start] - shift)}): it is read after the run before, its steps shifted by +{shift}")
    return seq, warnings


def _per_epoch(parts, raw: np.ndarray) -> int:
    totals = [t.totals[used[1]] for t, _, _, used in parts if used and used[1] in t.totals]
    if totals:
        return int(max(totals))
    b = raw[:, 1]
    return int(np.nanmax(b) + (1 if np.nanmin(b) == 0 else 0))
