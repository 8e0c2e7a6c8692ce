"""The update size as evidence of an LR fault: ``||dtheta|| / ||theta||`` against its own history.

An LR jump (a wrong schedule, a config reloaded with another LR, a unit slip) multiplies every
update 10-30x on any model, yet the training loss and the grad norm often stay flat: the model
jumps to a worse basin and sits there (the zoo's LR-jump scenario, issue 20), so a loss or
grad-norm test cannot see it. The update-to-weight ratio measured by
:class:`~lossguard.guard.precursors.PrecursorMonitor` does: it follows the LR step for step.

:class:`UpdateSizeTest` keeps a trailing window of accepted ratios (and of the LRs they were taken
at). A ratio above ``factor`` times the window's median is a jumped update. It is an **update
jump** at once when the LR the optimizer used jumped by ``factor`` too (the LR explains the update:
no hard batch moves the LR), or after ``confirm`` jumped updates at an unchanged LR (the
optimizer's state or the gradients changed). The answer (:mod:`lossguard.recovery.update_jump`, one
rule for the guard and ``simulate``): roll back to the newest checkpoint at or before the jump's
first step, so its updates are undone, and cut the LR from that step on by the measured jump -- the
LR back to what it was before the jump, or the update size back to its history -- for the rest of
the run; at most ``max_cuts`` times. The decision names the evidence: the ratio, its history, and
whether the LR jumped too.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from statistics import median
from typing import Any

from .. import metrics as M
from ..errors import ConfigError
from ..recovery.decision import Decision
from ..recovery.update_jump import CAUSE, jump_decision


@dataclass(kw_only=True)
class UpdateSizeConfig:
    """Settings of :class:`UpdateSizeTest`."""

    window: int = 32
    """Trailing accepted ratios the median is taken over. Short enough that a linear warm-up (the
    ratio grows with the LR) moves the median along: 32 steps into a warm-up of 100 the ratio is
    ~2x the window's median, well under ``factor``."""
    min_points: int = 32
    """No judgement before this many ratios (the first steps' ratios are dominated by Adam's bias
    correction and the warm-up)."""
    factor: float = 5.0
    """A ratio above this multiple of the trailing median is a jump (an LR jump gives 10-30x); an LR
    above this multiple of its trailing median explains it."""
    confirm: int = 3
    """Jumped updates at an unchanged LR before acting (one large update is a hard batch, not a
    fault). A jumped update whose LR jumped too needs no confirmation: issue 20's zoo, with 3
    always, let the loss tests see the jumped updates' damage first (47/90 runs within 2% of clean)."""
    max_cuts: int = 2
    """At most this many update jumps answered in a run (each a rollback and an LR cut)."""
    min_cut: float = 0.02
    """The cut's factor is at least this (a 50x jump is cut back to 1x, not further)."""
    rollback: bool = True
    """Roll back to the newest checkpoint at or before the jump's first step (its updates undone),
    the LR cut applying from that step on. False: the LR cut alone, from the next step. Without a
    checkpoint there (or a store) the cut is made alone either way. Zoo (issue 20, 90 LR-jump runs,
    5 plain-loop families x 3 seeds): 90/90 within 2% of clean with it, 47/90 with the cut alone
    (confirmed on the third jumped update then). Known limit: the end of a temporary LR cut of the
    guard's own (``recurrence_lr_steps`` set; the default keeps that cut) raises the LR as a jump
    would, and is answered as one."""

    def __post_init__(self) -> None:
        problems = []
        if self.window < 4 or self.min_points < 4:
            problems.append("fields 'window' and 'min_points' must be >= 4")
        if not self.factor > 1:
            problems.append(f"field 'factor' must be > 1, got {self.factor!r}")
        if self.confirm < 1 or self.max_cuts < 0:
            problems.append("field 'confirm' must be >= 1 and 'max_cuts' >= 0")
        if not 0 < self.min_cut < 1:
            problems.append(f"field 'min_cut' must be in (0, 1), got {self.min_cut!r}")
        if problems:
            raise ConfigError("; ".join(problems), fix="correct the UpdateSizeConfig fields listed")


LR_CUT_CAUSE = CAUSE
"""The ledger's cause for this test's LR cut (:data:`lossguard.recovery.update_jump.CAUSE`)."""


class UpdateSizeTest:
    """Update-jump test (a responder of :class:`~lossguard.guard.StabilityGuard`); its answer, a
    rollback and an LR cut, is carried out by the guard (:mod:`lossguard.recovery.update_jump`).

    Args:
        config: thresholds and bounds.
    """

    def __init__(self, config: UpdateSizeConfig | None = None) -> None:
        self.config = config or UpdateSizeConfig()
        self._hist: deque[float] = deque(maxlen=self.config.window)
        self._lrs: deque[float] = deque(maxlen=self.config.window)
        self._run: list[float] = []
        self._run_start: int | None = None
        self.cuts = 0
        self.factor = 1.0

    def respond(self, step: int, monitor, values: list[float], ledger=None,
                lr: float = float("nan")) -> list[Decision]:
        """Judge step ``step``'s update ratio (from the monitor's packed values); returns the
        decisions for the guard to carry out (``ledger`` is unused: the guard books them)."""
        return self.observe(step, monitor.decode(values).get(M.UPDATE_RATIO, float("nan")), lr)

    def _accept(self, ratio: float, lr: float) -> None:
        self._run, self._run_start = [], None
        self._hist.append(ratio)
        self._lrs.append(lr)

    def observe(self, step: int, ratio: float, lr: float = float("nan"), ledger=None) -> list[Decision]:
        """Judge one update ratio (taken at LR ``lr``); returns the update jump's decision, or none."""
        cfg = self.config
        if not ratio == ratio or ratio <= 0:  # NaN or no update (a skipped step): nothing to judge
            return []
        if len(self._hist) < cfg.min_points:
            self._hist.append(ratio)
            self._lrs.append(lr)
            return []
        base = median(self._hist)
        if ratio <= cfg.factor * base:
            self._accept(ratio, lr)
            return []
        if self._run_start is None:
            self._run_start = int(step)
        self._run.append(ratio)
        lrs = [x for x in self._lrs if x == x and x > 0]
        lr_jump = lr / median(lrs) if lrs and lr == lr else float("nan")
        by_lr = lr_jump == lr_jump and lr_jump >= cfg.factor  # the LR explains the update: no hard batch
        if (len(self._run) < cfg.confirm and not by_lr) or self.cuts >= cfg.max_cuts:
            return []
        jump, onset, n = median(self._run), self._run_start, len(self._run)
        self._run, self._run_start = [], None
        self.cuts += 1
        # The LR back to what it was just before the jump, or (same LR) the update size back to its history.
        cut = min(1.0, max(cfg.min_cut, lrs[-1] / lr if by_lr else base / jump))
        self.factor *= cut
        cause = (f"the LR the optimizer used jumped {lr_jump:.3g}x too (a schedule or config fault)" if by_lr else
                 "at the same LR (the optimizer's state or the gradients changed)")
        evidence = (f"update-to-weight ratio {jump:.3g} on {n} step(s) from step {onset}, {jump / base:.3g}x its "
                    f"median {base:.3g} over the last {len(self._hist)} steps, {cause}; LR cut x{cut:.3g} "
                    f"(update jump {self.cuts} of {cfg.max_cuts})")
        return [jump_decision(step=step, onset=onset, cut=cut, evidence=evidence, rollback=cfg.rollback,
                              numbers={"update_ratio": jump, "update_ratio_median": base,
                                       "lr_jump": lr_jump if lr_jump == lr_jump else None})]

    def state_dict(self) -> dict[str, Any]:
        """The trailing window, the jump in progress and the cuts made (JSON-safe)."""
        return {"hist": list(self._hist), "lrs": [None if x != x else x for x in self._lrs],
                "run": list(self._run), "run_start": self._run_start, "cuts": self.cuts, "factor": self.factor}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output: the windows as saved (they roll back with the weights),
        the cut budget only grows (a rollback does not give back cuts already made)."""
        self._hist = deque((float(x) for x in sd["hist"]), maxlen=self.config.window)
        self._lrs = deque((float("nan") if x is None else float(x) for x in sd["lrs"]), maxlen=self.config.window)
        self._run = [float(x) for x in sd["run"]]
        start = sd.get("run_start")
        self._run_start = None if start is None else int(start)
        if int(sd["cuts"]) >= self.cuts:
            self.cuts, self.factor = int(sd["cuts"]), float(sd["factor"])


def replay_update_size(steps, ratio, lr, withheld, config: UpdateSizeConfig | None = None, *,
                       checkpoints=None, max_rollbacks: int = 10) -> list[dict[str, Any]]:
    """:class:`UpdateSizeTest` replayed over a recorded log (``lossguard simulate``): the event
    records of its decisions, resolved as the live guard resolves them
    (:func:`lossguard.recovery.update_jump.resolve_jump`: a rollback to the newest checkpoint at or
    before the jump, then its LR cut; or the cut alone).

    Args:
        steps: the replayed steps.
        ratio: the logged update-to-weight ratio at each (NaN where not logged).
        lr: the logged LR at each (NaN where not logged).
        withheld: True where the replayed judge withholds the update (no update: nothing to judge,
            as the live test sees a zero ratio there).
        config: the test's thresholds.
        checkpoints: the checkpoint steps assumed (None: no store, the cut alone).
        max_rollbacks: the run's rollback budget (``GuardConfig.max_rollbacks``).
    """
    from ..recovery.action import Action
    from ..recovery.checkpoint_choice import choose_checkpoint
    from ..recovery.ledger import RunLedger
    from ..recovery.update_jump import cut_after_rollback, resolve_jump

    test, ledger = UpdateSizeTest(config), RunLedger()
    out: list[dict[str, Any]] = []
    for st, r, a, w in zip(steps, ratio, lr, withheld, strict=True):
        for d in test.observe(int(st), float("nan") if w else float(r), float(a)):
            here = None if checkpoints is None else [c for c in checkpoints if c <= int(st)]
            d = resolve_jump(d, here, ledger, max_rollbacks=max_rollbacks)
            if d.action is not Action.ROLLBACK:
                out.append(d.record())
                continue
            target = choose_checkpoint(int(d.numbers["onset"]), here or [], 0)
            assert target is not None  # resolve_jump checked it
            ledger.rollbacks += 1
            out += [{**d.record(), "to_step": target}, cut_after_rollback(ledger, d, target).record()]
    return out


def merge_update_size(sim: Any, steps, ratio, lr_log, withheld, update_size: Any) -> None:
    """``simulate``'s replay of this test: its rollbacks and LR cuts join ``sim.decisions`` in step order (up to a
    halt), and everything after the first decision that changes the future is marked
    counterfactual, as ``simulate`` marks its own.

    Args:
        sim: the :class:`~lossguard.simulate.Simulation` to add to.
        steps: the replayed steps.
        ratio: ``(values, logged mask)`` of the log's update ratio at ``steps``, or None (a note).
        lr_log: ``(values, logged mask)`` of the log's LR, or None.
        withheld: where the replayed judge withholds the update.
        update_size: an :class:`UpdateSizeConfig`, or True for its defaults; None: not replayed.
    """
    import numpy as np

    if update_size is None:
        return
    from ..recovery.action import Action

    if ratio is None:
        sim.notes.append("no update_ratio in the log: the update-size test was not replayed")
        return
    lr = lr_log[0] if lr_log is not None else np.full(len(steps), np.nan)
    cfg = update_size if isinstance(update_size, UpdateSizeConfig) else None
    recs = replay_update_size(steps, ratio[0], lr, withheld, cfg, checkpoints=sim.checkpoints,
                              max_rollbacks=int(sim.config.get("max_rollbacks", 10)))
    halt = sim.halted_at
    sim.decisions += [r for r in recs if halt is None or r["step"] <= halt]
    sim.decisions.sort(key=lambda d: d["step"])  # stable: the policy's order within a step is kept
    sim.first_change = None
    for d in sim.decisions:
        d.pop("counterfactual", None)
        if sim.first_change is not None:
            d["counterfactual"] = True
        elif Action(d["event"]).changes_future:
            sim.first_change = int(d["step"])
