"""Simulate the guard over a recorded log: what would it have done, step by step?

``simulate(log, config)`` replays the guard's judge and policy -- the same :class:`GuardConfig`,
the same outlier test (the vectorised twin of the guard's :class:`OnlineOutlier`, proven equal
point for point), the same :class:`RecoveryPolicy` and :func:`choose_checkpoint` -- over a run that
was logged without the guard. It is how a team chooses thresholds on its own past runs before it
turns the guard on.

Assumptions about a log (the log cannot say what a live guard knows):

- **batch index == step**, unless the log has a ``batch_index`` series, which is used instead;
- **checkpoints** at step 0, every ``config.checkpoint_every`` steps (None: only step 0) and at
  the first step of every resume or rollback in the log (the run restarted from a checkpoint there),
  unless a list is given (``checkpoints=``, e.g. from ``--checkpoints``);
- the LR-ramp evidence (``lr_ramp_window``: is the LR still rising?) comes from the log's ``lr``
  series; a log without one is never in the ramp (a live guard reads the optimizer's LR);
- the grad-norm test runs only where the log has a grad norm (a log without one is judged on its
  loss alone, plus a note); loss-scale resets are not simulated (no GradScaler to watch);
- ``max_withheld_streak`` halts as in the live guard (a rollback ends a streak);
- a **skip** is taken not to change what follows (one withheld update; the recorded next step is
  what the guarded run would have seen, approximately). Every action after the first one that
  *changes the future* (rollback, LR cut, loss-scale reset, halt) is marked ``counterfactual``:
  the recorded log goes on as if the guard had not acted, so those later decisions only say what
  the guard would see if the run looked the same.

Cost: two vectorised outlier passes and one running minimum (the loss-rise rule) over the whole log,
plus Python work per *bad* step and per step where the loss-rise rule fires only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .detect.outlier import score
from .guard.config import GuardConfig
from .guard.judge.evidence import evidence_series, onset_lag
from .guard.withheld import ReplayedStreak
from .guard.update_size import merge_update_size
from .jsonsafe import strict_json
from .detect.loss_scale import is_static
from .metrics import GRAD_NORM, LOSS, LOSS_SCALE, LR, UPDATE_RATIO
from .recovery.action import Action
from .recovery.decision import Decision
from .recovery.finding import WholeLogFinding
from .recovery.lr_phase import lr_jumps, lr_ramp_series
from .recovery.policy import RecoveryPolicy
from .recovery.resolve import halt_resume_point, loss_scale_reset_with, resolve_rollback
from .recovery.rise_series import LossRiseSeries
from .recovery.verdict import Evidence, Verdict
from .runlog import RunLog
from .stitch import stitch

SIMULATION_FORMAT = 1
"""Version of :meth:`Simulation.to_dict` (``lossguard simulate --json``)."""


@dataclass
class Simulation:
    """What the guard would have done over a recorded run.

    Attributes:
        steps: points replayed (live loss points of the stitched log).
        first_step / last_step: the steps replayed.
        decisions: the event records the guard would have written, in order; each has
            ``"counterfactual": true`` once an earlier action changed the future.
        first_change: step of the first action that changes the future (None: only skips).
        checkpoints: the checkpoint steps assumed (or given).
        config: the guard configuration used (as a dict).
        notes: assumptions that applied to this log.
    """

    steps: int
    first_step: int | None
    last_step: int | None
    decisions: list[dict[str, Any]] = field(default_factory=list)
    first_change: int | None = None
    checkpoints: list[int] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def of(self, action: Action | str) -> list[dict[str, Any]]:
        """The decision records of one action."""
        value = Action(action).value
        return [d for d in self.decisions if d["event"] == value]

    @property
    def skipped_steps(self) -> list[int]:
        """Steps whose update would have been withheld."""
        return [int(d["step"]) for d in self.of(Action.SKIP)]

    @property
    def halted_at(self) -> int | None:
        """Step of the halt, or None."""
        h = self.of(Action.HALT)
        return int(h[0]["step"]) if h else None

    def summary(self) -> dict[str, Any]:
        """Counts per action and the headline facts."""
        counts = {a.value: len(self.of(a)) for a in (Action.SKIP, Action.ROLLBACK, Action.LR_CUT, Action.HALT)}
        return {"actions": counts, "first_change": self.first_change, "halted_at": self.halted_at}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready document (strict: non-finite numbers as null)."""
        return strict_json({"format": SIMULATION_FORMAT, "steps": self.steps, "first_step": self.first_step,
                        "last_step": self.last_step, "summary": self.summary(), "decisions": self.decisions,
                        "checkpoints": self.checkpoints, "notes": self.notes, "config": self.config,
                        "conventions": {"batch_index": "== step unless the log has a batch_index series",
                                        "skip_batches": "half-open [start, stop)"}})


def _aligned(log: RunLog, metric: str, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Values of ``metric`` at ``steps`` and a mask of where it was logged (None if absent)."""
    if metric not in log.series:
        return None
    s, v = log.live(metric)
    if len(s) == 0:
        return None
    idx = np.clip(np.searchsorted(s, steps), 0, len(s) - 1)
    present = s[idx] == steps
    return np.where(present, v[idx], np.nan), present


def simulate(log: RunLog, config: GuardConfig | None = None, *, checkpoints: Sequence[int] | None = None,
             metric: str = LOSS, findings: Sequence[WholeLogFinding] = (), update_size: Any = None) -> Simulation:
    """Replay the guard's judge and policy over ``log`` (see the module docstring).

    Args:
        log: the recorded run (stitched here if needed).
        config: the guard configuration (default: the guard's defaults).
        checkpoints: checkpoint steps that exist; default step 0 and every ``checkpoint_every``.
        metric: the loss series to judge.
        findings: whole-log evidence for the policy (:mod:`lossguard.recovery.finding`: what the
            analyser found that a live guard cannot see, e.g. repeated data after a resume). Empty
            (the default): exactly what a live guard decides. ``analyze`` and ``lossguard simulate``
            pass the analyser's findings, so they name the same actions.
        update_size: replay the update-size test too: :func:`lossguard.guard.update_size.merge_update_size`.

    Returns:
        The :class:`Simulation`.

    Raises:
        LossguardError: the log has no such loss series.
    """
    from dataclasses import asdict

    from .errors import LossguardError

    cfg = config or GuardConfig()
    log = stitch(log)
    if metric not in log.series:
        raise LossguardError(f"the log has no {metric!r} series to simulate the guard on", path=", ".join(log.sources),
                             fix=f"the metrics found are: {', '.join(log.metrics) or 'none'}")
    steps, loss = log.live(metric)
    notes: list[str] = []
    ls = score(loss, cfg.loss)
    gn_vals = np.full(len(steps), np.nan)
    gn_z = np.full(len(steps), np.nan)
    present = np.zeros(len(steps), dtype=bool)
    gs = None
    gn = _aligned(log, GRAD_NORM, steps)
    if gn is None:
        notes.append("no grad norm in the log: judged on the loss alone")
    else:
        gn_vals, present = gn
        if cfg.grad_norm is not None:
            gs = score(gn_vals[present], cfg.grad_norm)  # the test sees only the points it was fed
            gn_z[present] = gs.z
    lr_log = _aligned(log, LR, steps)
    ramp = (np.zeros(len(steps), dtype=bool) if lr_log is None else
            lr_ramp_series(steps, np.where(lr_log[1], lr_log[0], np.nan), cfg.lr_ramp_window))
    bad, gn_out, gn_ratio, evidence = evidence_series(  # the judge's rule, vectorised: the live judge's twin
        loss, ls, gn_vals, present, gs, cfg, in_lr_ramp=ramp & ~lr_jumps(steps, lr_log, cfg.lr_ramp_window))
    bidx = _aligned(log, "batch_index", steps)
    batch = steps.astype(np.int64) if bidx is None else np.where(bidx[1], bidx[0], steps).astype(np.int64)
    if bidx is None:
        notes.append("batch index taken to be the step (the log has no batch_index)")
    if checkpoints is None:
        every = cfg.checkpoint_every
        last = int(steps[-1]) if len(steps) else 0
        # A resume (a new segment) started from a checkpoint at its first step: the log says so.
        resumes = sorted({int(g.first_step) for g in log.segments[1:] if 0 < g.first_step <= last})
        ck = sorted(set(range(0, last + 1, every) if every else [0]) | set(resumes))
        where = f"step 0 and every {every} steps" if every else "step 0 only (checkpoint_every is None)"
        notes.append(f"checkpoints assumed at {where}" + (f", and at the {len(resumes)} resume(s)" if resumes else ""))
    else:
        ck = sorted(int(c) for c in checkpoints)
    # The log's length stands for the run's (it bounds the skip margin, as the live guard's steps= does).
    # A loss scale that moves is an fp16 run with a GradScaler: the guard resets it with every rollback
    # (the per-step loss-scale checks are not replayed: the policy is fed only the bad steps).
    scaled = _aligned(log, LOSS_SCALE, steps)
    has_scaler = scaled is not None and not is_static(scaled[0])
    policy = RecoveryPolicy(cfg, run_steps=int(steps[-1]) + 1 if len(steps) else None, has_scaler=has_scaler)
    sim = Simulation(steps=len(steps), first_step=int(steps[0]) if len(steps) else None,
                     last_step=int(steps[-1]) if len(steps) else None, checkpoints=ck, config=asdict(cfg), notes=notes)

    def verdict(i: int) -> Verdict:
        ev = Evidence(int(evidence[i]))
        return Verdict(step=int(steps[i]), batch_index=int(batch[i]), loss=float(loss[i]), grad_norm=float(gn_vals[i]),
                       loss_z=float(ls.z[i]), grad_norm_z=float(gn_z[i]), loss_baseline=float(ls.baseline[i]),
                       loss_outlier=bool(ls.outlier[i]), grad_norm_outlier=bool(gn_out[i]), overflow=False,
                       bad=bool(bad[i]), grad_norm_ratio=float(gn_ratio[i]), evidence=ev,
                       onset_lag=onset_lag(ev, cfg.evidence), in_lr_ramp=bool(ramp[i]),
                       lr=float(lr_log[0][i]) if lr_log is not None else float("nan"))

    # The policy changes state on bad verdicts and, through its loss-rise rule, on good ones where
    # that rule fires. Both are found vectorised; the policy is fed only those steps, in order, and
    # stays the one definition of the decision. (The good verdicts in between are accounted for by
    # the episode gap, which compares step numbers, and by the rule's level, set from its twin.)
    bad_idx = np.flatnonzero(bad)
    found = sorted(findings, key=lambda f: f.step)
    found_idx = np.searchsorted(steps, [f.step for f in found]) if found else np.zeros(0, np.int64)
    nxt = b = 0
    eligible = ~bad & np.isfinite(ls.baseline) if cfg.loss_rise is not None else np.zeros(len(steps), dtype=bool)
    rise = LossRiseSeries(ls.baseline, eligible, cfg, start=0)
    streak = ReplayedStreak(None if cfg.shadow else cfg.max_withheld_streak)  # the live guard's cap
    while True:
        nb = int(bad_idx[b]) if b < len(bad_idx) else len(steps)
        nf = rise.next_fire()
        nw = int(found_idx[nxt]) if nxt < len(found) else len(steps)
        if nw < min(nb, nf):  # a whole-log finding first: the same policy decides about it
            nxt += 1
            if _play(policy.observe_finding(found[nxt - 1]), [c for c in ck if c <= steps[nw]], cfg, sim, policy):
                break
            continue
        i = min(nb, nf)
        if i >= len(steps):
            break
        if nb <= nf:
            b += 1
        else:
            policy.level = rise.level_before(nf, steps)  # what the policy holds there, fed every step
        here = [c for c in ck if c <= int(steps[i])]  # only checkpoints up to here exist
        decisions = policy.observe(verdict(i))
        if _play(decisions, here, cfg, sim, policy) or \
                _play(streak.observe(i, int(steps[i]), bool(bad[i]), decisions), here, cfg, sim, policy):
            break
        if nb > nf and policy.level["seen"] == 0:  # the rule rolled back: it watches afresh from here
            rise = LossRiseSeries(ls.baseline, eligible, cfg, start=i + 1)
    merge_update_size(sim, steps, _aligned(log, UPDATE_RATIO, steps), lr_log, bad, update_size)  # opt-in
    return sim


def _play(decisions: list[Decision], checkpoints: list[int], cfg: GuardConfig, sim: Simulation,
          policy: RecoveryPolicy) -> bool:
    """Book the policy's decisions for one step; returns True once the simulated run halted."""
    def emit(d: Decision, **extra: Any) -> None:
        rec = {**d.record(), **extra}
        if sim.first_change is not None:
            rec["counterfactual"] = True
        sim.decisions.append(rec)
        if d.action.changes_future and sim.first_change is None:
            sim.first_change = d.step

    for d in decisions:
        if d.action is Action.ROLLBACK:
            # The executor's own resolver (recovery/resolve.py): the same target, halt and words.
            r = resolve_rollback(d, checkpoints, cfg.recipe)
            if not r.halts and r.target is not None:  # a halt has no target
                follow = policy.rolled_back(d, r.target)
                emit(d, to_step=r.target)
                for f in follow:
                    emit(f)
                if policy.has_scaler and cfg.recipe.reset_loss_scale:  # as the executor does, after the restore
                    emit(loss_scale_reset_with(r.target))
                continue
            d = r.decision
        if d.action is Action.HALT:
            emit(d, resume_from=halt_resume_point(d, checkpoints, cfg.recipe))
            return True
        emit(d)
    return False

