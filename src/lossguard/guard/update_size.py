"""The update size as evidence of an LR fault: ``||dtheta|| / ||theta||`` against its own history.

An LR jump (a wrong schedule, a config reloaded with another LR, a unit slip) multiplies every
update 10-30x on any model, yet the training loss and the grad norm often stay flat: the model
jumps to a worse basin and sits there (the zoo's LR-jump scenario, issue 20), so a loss or
grad-norm test cannot see it. The update-to-weight ratio measured by
:class:`~lossguard.guard.precursors.PrecursorMonitor` does: it follows the LR step for step.

:class:`UpdateSizeTest` keeps a trailing window of accepted ratios; ``confirm`` consecutive steps
above ``factor`` times its median are an **update jump**. The response is an LR cut by the measured
jump (the median over the jump's ratio), so the update size returns to its history, for the rest of
the run, through the run ledger like every LR cut of the guard; bounded by ``max_cuts``.
The event names the evidence: the ratio, its history, and whether the LR the optimizer used jumped
too (a schedule or config fault) or the update grew at the same LR (the optimizer's state).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from statistics import median
from typing import Any

from .. import metrics as M
from ..errors import ConfigError


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
    """A ratio above this multiple of the trailing median is a jump (an LR jump gives 10-30x)."""
    confirm: int = 3
    """Consecutive jumped steps before acting (one large update is a hard batch, not a fault)."""
    max_cuts: int = 2
    """At most this many LR cuts in a run."""
    min_cut: float = 0.02
    """The cut's factor is at least this (a 50x jump is cut back to 1x, not further)."""

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


LR_CUT_CAUSE = "update_jump"
"""The ledger's cause for this test's LR cut."""


class UpdateSizeTest:
    """Update-jump test and its LR cut (a responder of :class:`~lossguard.guard.StabilityGuard`).

    Args:
        config: thresholds and bounds.
    """

    def __init__(self, config: UpdateSizeConfig | None = None) -> None:
        self.config = config or UpdateSizeConfig()
        self._hist: deque[float] = deque(maxlen=self.config.window)
        self._lrs: deque[float] = deque(maxlen=self.config.window)
        self._run: list[float] = []
        self.cuts = 0
        self.factor = 1.0

    def respond(self, step: int, monitor, values: list[float], ledger=None,
                lr: float = float("nan")) -> list[dict[str, Any]]:
        """Judge step ``step``'s update ratio (from the monitor's packed values); returns event records."""
        return self.observe(step, monitor.decode(values).get(M.UPDATE_RATIO, float("nan")), lr, ledger)

    def observe(self, step: int, ratio: float, lr: float = float("nan"), ledger=None) -> list[dict[str, Any]]:
        """Judge one update ratio; returns the event records (an ``lr_cut`` with its evidence, or none)."""
        cfg = self.config
        if not ratio == ratio or ratio <= 0:  # NaN or no update (a skipped step): nothing to judge
            return []
        if len(self._hist) < cfg.min_points:
            self._hist.append(ratio)
            self._lrs.append(lr)
            return []
        base = median(self._hist)
        if ratio <= cfg.factor * base:
            self._run = []
            self._hist.append(ratio)
            self._lrs.append(lr)
            return []
        self._run.append(ratio)
        if len(self._run) < cfg.confirm or self.cuts >= cfg.max_cuts:
            return []
        jump = median(self._run)
        self._run = []
        self.cuts += 1
        cut = max(cfg.min_cut, base / jump)
        self.factor *= cut
        lr_base = median(x for x in self._lrs if x == x) if any(x == x for x in self._lrs) else float("nan")
        lr_jump = lr / lr_base if lr == lr and lr_base and lr_base == lr_base else float("nan")
        cause = (f"the LR the optimizer used jumped {lr_jump:.3g}x too (a schedule or config fault)"
                 if lr_jump == lr_jump and lr_jump > cfg.factor / 2 else
                 "at the same LR (the optimizer's state or the gradients changed)")
        if ledger is not None:
            from ..recovery.ledger import LrCut
            ledger.set_lr_cut(LrCut(start_step=step + 1, until_step=None, factor=self.factor, cause=LR_CUT_CAUSE))
            ledger.save()
        return [_with_reasons({"step": step, "event": "lr_cut", "cause": LR_CUT_CAUSE, "factor": self.factor,
                 "update_ratio": jump, "update_ratio_median": base,
                 "evidence": f"update-to-weight ratio {jump:.3g} on {cfg.confirm} steps in a row, "
                             f"{jump / base:.3g}x its median {base:.3g} over the last {len(self._hist)} steps, "
                             f"{cause}; LR cut to {self.factor:.3g}x (cut {self.cuts} of {cfg.max_cuts})"})]


    def state_dict(self) -> dict[str, Any]:
        """The trailing window, the jump in progress and the cuts made (JSON-safe)."""
        return {"hist": list(self._hist), "lrs": [None if x != x else x for x in self._lrs],
                "run": list(self._run), "cuts": self.cuts, "factor": self.factor}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output: the windows as saved (they roll back with the weights),
        the cut budget only grows (a rollback does not give back cuts already made)."""
        self._hist = deque((float(x) for x in sd["hist"]), maxlen=self.config.window)
        self._lrs = deque((float("nan") if x is None else float(x) for x in sd["lrs"]), maxlen=self.config.window)
        self._run = [float(x) for x in sd["run"]]
        if int(sd["cuts"]) >= self.cuts:
            self.cuts, self.factor = int(sd["cuts"]), float(sd["factor"])


def replay_update_size(steps, ratio, lr, withheld, config: UpdateSizeConfig | None = None) -> list[dict[str, Any]]:
    """:class:`UpdateSizeTest` replayed over a recorded log (``lossguard simulate``): its event records.

    Args:
        steps: the replayed steps.
        ratio: the logged update-to-weight ratio at each (NaN where not logged).
        lr: the logged LR at each (NaN where not logged).
        withheld: True where the replayed judge withholds the update (no update: nothing to judge,
            as the live test sees a zero ratio there).
        config: the test's thresholds.
    """
    test = UpdateSizeTest(config)
    out: list[dict[str, Any]] = []
    for st, r, a, w in zip(steps, ratio, lr, withheld, strict=True):
        out += test.observe(int(st), float("nan") if w else float(r), float(a))
    return out


def merge_update_size(sim: Any, steps, ratio, lr_log, withheld, update_size: Any) -> None:
    """``simulate``'s replay of this test: its LR cuts join ``sim.decisions`` in step order (up to a
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
    recs = replay_update_size(steps, ratio[0], lr, withheld, cfg)
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


def _with_reasons(rec: dict[str, Any]) -> dict[str, Any]:
    """The record with its evidence also as ``reasons`` (the key every guard decision record has)."""
    rec["reasons"] = [rec["evidence"]]
    return rec
