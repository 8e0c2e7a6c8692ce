"""One verdict, checked: the first heavy action of ``analyze``, ``simulate`` and a live guard on one log.

A *heavy* action changes the run's future: a rollback, an LR cut or a halt (:data:`lossguard.plan.HEAVY`).
For one recorded per-step log this module finds the first one

- in ``analyze``'s plans (:func:`from_analysis`),
- in ``simulate`` as the command line runs it, with the analyser's whole-log findings
  (:func:`from_simulation`),
- in a **live** :class:`~lossguard.guard.StabilityGuard` that trains a one-parameter model whose
  loss and gradient norm are, step by step, the logged ones (:func:`from_live_guard`): a real guard,
  judge, policy, executor and checkpoint store; the model's autograd function returns the logged
  loss and a gradient of the logged norm, so the guard measures exactly what the log recorded.

:func:`compare` says whether they agree -- the same action, at the same step, with the same reasons
and the same rollback target and skipped batches -- and if not, which documented rule separates them
(the live guard never gets whole-log findings: :mod:`lossguard.recovery.finding`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lossguard.plan import HEAVY, heavy_groups
from lossguard.recovery.action import Action

LOSS_SCALE_RESET = Action.LOSS_SCALE_RESET.value

__all__ = ["Heavy", "compare", "from_analysis", "from_live_guard", "from_simulation", "shifted"]


@dataclass(frozen=True)
class Heavy:
    """A first heavy action: what, when, why, and (for a rollback) where to and which data."""

    action: str
    step: int
    reasons: tuple[str, ...]
    """The words: the action's reasons, then its follow-ups' (an LR cut's, then a loss-scale reset's)."""
    to_step: int | None = None
    skip_batches: tuple[int, int] | None = None
    cause: str | None = None
    scale_reset: tuple[str, ...] = ()
    """The loss-scale reset follow-up's reasons (the last of ``reasons``; empty for a plan, whose
    words are one list)."""

    @classmethod
    def of(cls, group: list[dict[str, Any]]) -> "Heavy":
        """From a heavy decision record and its follow-ups (:func:`lossguard.plan.heavy_groups` of
        ``simulate``'s records or the guard's JSONL events): the words are all of theirs, in order."""
        rec = group[0]
        sb = rec.get("skip_batches")
        reasons = tuple(r for d in group for r in d.get("reasons", ()))
        reset = tuple(r for d in group[1:] if d["event"] == LOSS_SCALE_RESET for r in d.get("reasons", ()))
        return cls(str(rec["event"]), int(rec["step"]), reasons, rec.get("to_step"),
                   None if sb is None else (int(sb[0]), int(sb[1])), rec.get("cause"), reset)

    def without_scaler(self) -> "Heavy":
        """These words as a guard without a GradScaler would say them (no loss-scale reset follows)."""
        if not self.scale_reset:
            return self
        n = len(self.reasons) - len(self.scale_reset)
        return replace(self, reasons=self.reasons[:n], scale_reset=())


def from_analysis(analysis) -> Heavy | None:
    """The earliest heavy plan of an :class:`~lossguard.analysis.Analysis`, read from what ``analyze
    --json`` writes (:meth:`RecoveryPlan.to_dict`): the plan's own action, step, target, skipped
    batches and words -- not the decision records filed under it."""
    plans = [(p, p.to_dict()) for p in analysis.plans]
    heavy = [(p, d) for p, d in plans if d["action"] in HEAVY and d["step"] is not None]
    if not heavy:
        return None
    p, d = min(heavy, key=lambda pd: pd[1]["step"])
    sb = d["skip_batches"]
    return Heavy(d["action"], int(d["step"]), tuple(d["reasons"]), d["rollback_to_step"],
                 None if sb is None else (int(sb[0]), int(sb[1])), p.decisions[0].get("cause") if p.decisions else None)


def from_simulation(sim) -> Heavy | None:
    """The first heavy decision of a :class:`~lossguard.simulate.Simulation`, with its follow-ups."""
    groups = heavy_groups(sim.decisions)
    return Heavy.of(groups[0]) if groups else None


def shifted(log, by: int):
    """``log`` (unstitched) with every step moved by ``-by`` (a log whose steps count updates from 1,
    as HF and Megatron log them, numbered from 0 as the guard numbers its steps)."""
    series = {k: replace(s, steps=s.steps - by) for k, s in log.series.items()}
    segs = [replace(g, first_step=g.first_step - by, last_step=g.last_step - by) for g in log.segments]
    return replace(log, series=series, segments=segs)


def from_live_guard(log, config, workdir: str | Path, *, metric: str = "loss") -> Heavy | None:
    """Run a live guard over a per-step log (steps ``0..n-1`` of the stitched timeline, no gaps) and
    return its first heavy action (None: it never took one). Needs torch. At each resume of the log
    the guard checkpoints, stops and a new guard resumes from that checkpoint (``guard.restore``), so
    it knows its resumes as a live guard does.

    Args:
        log: the recorded run (stitched here); its live timeline must be every step from 0.
        config: the :class:`GuardConfig` (``checkpoint_every`` sets the store's checkpoints).
        workdir: an empty directory for the checkpoint store.
        metric: the loss series.

    Raises:
        ValueError: the timeline does not log every step from step 0.
    """
    import numpy as np
    import torch

    from lossguard.checkpoint import CheckpointStore
    from lossguard.guard import StabilityGuard
    from lossguard.metrics import GRAD_NORM
    from lossguard.stitch import stitch

    log = stitch(log)
    steps, loss = log.live(metric)
    if not len(steps) or steps[0] != 0 or np.any(np.diff(steps) != 1):
        raise ValueError("from_live_guard needs a per-step log numbered from step 0")
    gn = np.ones(len(steps))
    if GRAD_NORM in log.series:
        s, v = log.live(GRAD_NORM)
        if len(s):
            idx = np.clip(np.searchsorted(s, steps), 0, len(s) - 1)
            gn = _fill(np.where(s[idx] == steps, v[idx], np.nan), s[idx] == steps)

    class Recorded(torch.autograd.Function):
        """Returns the logged loss of a step; its backward gives the logged gradient norm."""

        @staticmethod
        def forward(ctx, w, value, norm):
            ctx.norm = norm
            return torch.tensor(value, dtype=torch.float64)

        @staticmethod
        def backward(ctx, grad):
            return torch.full((1,), ctx.norm, dtype=torch.float64) * grad, None, None

    model = torch.nn.Module()
    # A parameter norm far above any gradient: the first steps' sanity bound (grad norm vs parameter
    # norm) is then decided by the logged values alone, as simulate decides it (it has no weights).
    model.w = torch.nn.Parameter(torch.full((1,), 1e12, dtype=torch.float64))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    cfg = replace(config, stats="host", gate="host", replay=False, log_metrics=False, halt_raises=False)
    n = len(steps)
    # The log's resumes are real ones here: the process checkpoints at the resume's first step (the
    # recorded run resumed from a checkpoint there), stops, and a new guard resumes from it.
    resumes = sorted({int(g.first_step) for g in log.segments[1:]} & set(range(1, n)))
    start: int | None = None
    for stop in [*resumes, n]:
        store = CheckpointStore(Path(workdir), keep_last=1_000_000)
        guard = StabilityGuard(model, opt, store=store, config=cfg)
        if start is not None:
            guard.restore(start)
        seen = 0
        for step, _ in guard.batches(range(n), steps=n):
            out = Recorded.apply(model.w, float(loss[step]), float(gn[step]))
            out.backward()
            guard.step(out)
            heavy = heavy_groups(guard.events[seen:])  # the step's events: the action and its follow-ups
            seen = len(guard.events)
            if heavy:
                guard.close()
                return Heavy.of(heavy[0])
            if guard.step_count == stop:
                break
        if guard.halted or guard.step_count != stop:
            break
        if stop < n and store.newest_at_or_before(stop) != stop:
            guard.save()
        guard.close()
        start = stop
    guard.close()
    return None


def _fill(values, present):
    """A grad norm for every step: where the log has none for a step (Megatron logs none for a
    skipped iteration), the latest logged one -- a missing value is not a NaN gradient."""
    out, last = values.copy(), 1.0
    for i in range(len(out)):
        if present[i]:
            last = out[i]
        else:
            out[i] = last
    return out


def compare(a: Heavy | None, b: Heavy | None, *, scaler: bool = True) -> str | None:
    """None when two first heavy actions agree (both absent, or the same action, step, words, target
    and skipped data); else what differs, in words.

    Args:
        scaler: False when ``b`` is the live replay of :func:`from_live_guard`, which trains without a
            GradScaler (a log's loss scale cannot be replayed): ``a``'s loss-scale reset follow-up,
            which ``simulate`` books for an fp16 log as a guard with a scaler does, is then left out.
    """
    if not scaler and a is not None:
        a = a.without_scaler()
    if a is None and b is None:
        return None
    if a is None or b is None:
        return f"one acts ({a or b}), the other does not"
    for name in ("action", "step", "to_step", "skip_batches", "reasons"):  # reasons: all the words
        if getattr(a, name) != getattr(b, name):
            return f"{name}: {getattr(a, name)!r} != {getattr(b, name)!r}"
    return None
