"""The opt-in live treatment of attention-logit growth: QK-clip first, an LR cut when it persists.

Driven by the precursor (:mod:`.precursors`), not by the loss: at a learning rate that is too high
the largest attention logit grows by orders of magnitude hundreds of steps before the loss stalls
(issue 20: 28-59 at stable LRs, 294 to 4.9e5 at unstable ones; Wortsman et al. 2023, section 3.1).

1. **QK-clip** (:mod:`lossguard.techniques.qk_clip`, Kimi K2's MuonClip): a head whose largest logit
   passes ``tau`` has its W_q and W_k scaled by ``sqrt(tau / max)`` each. Bounded: at most
   ``max_clip_steps`` clipping steps in any ``window`` steps at one LR.
2. **LR cut**: when clipping keeps being needed (``max_clip_steps`` reached within ``window``), or
   the largest logit grows ``growth_factor``-fold within ``growth_window`` steps (:mod:`.logit_growth`:
   the rate shows an LR too high before the level does; such a cut also rolls back to before the
   growth, ``rollback``), the weights are not the problem but the step size is: the LR is cut by
   ``lr_cut_factor`` (a growth cut: sized to the growth) for the rest of the run (through the run
   ledger, like every LR cut of the guard), at most ``max_lr_cuts`` times and no closer than
   ``cut_gap`` steps apart. The cut, not the clip, carries the treatment at
   a high LR: Adam's update ``lr * m / sqrt(v)`` does not shrink with the weights, so a head whose
   W_q and W_k were just scaled down moves by the same absolute amount next step (a larger relative
   step) and its logits re-grow within a few steps.

Every action is an event in the guard's log with its evidence (the heads, their maxima, the factor).
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .logit_growth import LogitGrowth


@dataclass(kw_only=True)
class TreatmentConfig:
    """Settings of :class:`PrecursorTreatment`."""

    tau: float = 100.0
    """QK-clip threshold on a head's largest logit ``q.k/sqrt(d)``. Kimi K2 uses 100. Issue 20's
    byte-level GPT: 28-59 at every stable LR, 294 and up at every unstable one; a largest logit
    above 100 by step 200 flagged every unstable LR and no stable one."""
    window: int = 100
    """Steps over which the clip budget is counted."""
    cut_gap: int = 20
    """Least number of steps between two LR cuts. It was ``window`` (100): on the harsh benchmark
    preset at LR 0.1 the five cuts then took 300 steps (35 to 335), the heads grew unclipped to
    4.6e3 between them (the clip budget spent) and the run ended at 2.85 against 2.02 at the best
    LR. A cut shows in the logits within a few steps (Adam's step size is the LR), so one window
    between cuts only waits; the clip budget (``max_clip_steps`` clipping steps since the last
    cut) still has to be spent again before the next cut."""
    max_clip_steps: int = 20
    """At most this many steps with a clip in any ``window`` steps at one LR; reaching it triggers an
    LR cut, which opens a fresh budget at the lower LR (so at most ``(max_lr_cuts + 1) *
    max_clip_steps`` clipping steps in any ``window``)."""
    escape: float = 1.5
    """The spent clip budget cuts the LR only while the largest logit is above ``escape * tau``:
    clipping that holds the heads near ``tau`` (they creep to 101-113 and are clipped back) is
    QK-clip doing its job, not an LR too high. Without it, on the harsh preset at LR 3e-2 the
    held heads (largest 100.1-101.6) spent the budget three more times after the growth cut, taking
    the LR to 1/32 of its schedule (final 2.57; the first cut alone had brought the peak to 4.5e-3)."""
    lr_cut_factor: float = 0.5
    """Multiplier of each LR cut (cumulative: two cuts = 0.25)."""
    max_lr_cuts: int = 5
    """At most this many LR cuts in a run (0: clip only). Five halvings reach 1/32: issue 20's sweep
    spans 33x from its best LR (3e-3) to its highest (1e-1)."""
    clip: bool = True
    """Apply QK-clip (False: the LR cut alone, driven by the clip budget as if clipping)."""
    growth_factor: float | None = 10.0
    """An LR cut also when the largest attention logit grows ``growth_factor``-fold within
    ``growth_window`` steps to above ``growth_floor`` (None: off): the rate sees the instability
    before the level ``tau`` does (:mod:`.logit_growth`, with the measurements). Harsh preset: 28x
    in 10 steps at LR 1e-2 and 67x in 9 at 0.1 (both stall), at most 2.3x in 20 steps once above 10
    at the best LR (3e-3)."""
    growth_window: int = 20
    """Steps over which the growth is measured (a cut restarts it: the next needs new evidence)."""
    growth_target: float = 2.0
    """A growth-driven cut is sized to bring the growth per ``growth_window`` down to this: factor
    ``ln(growth_target) / ln(growth per window)``, within ``[min_cut_factor, lr_cut_factor]``. Why:
    under Adam the weights move ~LR per step, and the logits grew exponentially, so their log growth
    rate scales with the LR. 2: the best LR's largest growth above ``growth_floor`` (2.3x in 20 steps,
    harsh preset at 3e-3). A fixed 0.5 per cut came too late at LR 0.1 (the loss stalls at step ~12
    there; halvings every 20 steps reach 1/32 at step ~100: final 2.74 against 2.02 at the best LR)."""
    min_cut_factor: float = 0.1
    """The deepest single cut."""
    rollback: bool = True
    """A growth-driven cut also rolls back to the newest checkpoint at or before the growth window's
    first step (through the guard's update-jump answer, :mod:`lossguard.recovery.update_jump`: the
    LR cut booked from there, no data skipped; without such a checkpoint, or in framework mode, the
    cut alone). Why: on the harsh preset the loss stalls within the first ~10 warm-up steps at LR
    0.1; a cut at step 10 to 0.1x still ended at 2.62 against 2.02 at the best LR, and at 3e-2 the
    cut alone (2.505) did worse than the guard's own rollback to step 0 that it pre-empted (2.066)."""
    min_lr_factor: float = 1 / 32
    """The cumulative LR factor of the treatment never goes below this (issue 20's sweep spans 33x
    from its best LR to its highest)."""
    growth_floor: float = 10.0
    """Growth counts only once the largest logit is above this (at initialisation the logits are
    ~0.2 and grow 5-10x as the model first learns, at every LR)."""

    def __post_init__(self) -> None:
        problems = []
        if not self.tau > 0:
            problems.append(f"field 'tau' must be > 0, got {self.tau!r}")
        if self.window < 1:
            problems.append(f"field 'window' must be >= 1, got {self.window!r}")
        if self.cut_gap < 1:
            problems.append(f"field 'cut_gap' must be >= 1, got {self.cut_gap!r}")
        if not 1 <= self.max_clip_steps <= self.window:
            problems.append(f"field 'max_clip_steps' must be in [1, window], got {self.max_clip_steps!r}")
        if not 0 < self.lr_cut_factor < 1:
            problems.append(f"field 'lr_cut_factor' must be in (0, 1), got {self.lr_cut_factor!r}")
        if self.growth_factor is not None and not self.growth_factor > 1:
            problems.append(f"field 'growth_factor' must be > 1 or None, got {self.growth_factor!r}")
        if self.growth_window < 1:
            problems.append(f"field 'growth_window' must be >= 1, got {self.growth_window!r}")
        if not 0 < self.min_cut_factor <= self.lr_cut_factor:
            problems.append(f"field 'min_cut_factor' must be in (0, lr_cut_factor], got {self.min_cut_factor!r}")
        if not self.escape >= 1:
            problems.append(f"field 'escape' must be >= 1, got {self.escape!r}")
        if not 1 < self.growth_target:
            problems.append(f"field 'growth_target' must be > 1, got {self.growth_target!r}")
        if not 0 < self.min_lr_factor <= 1:
            problems.append(f"field 'min_lr_factor' must be in (0, 1], got {self.min_lr_factor!r}")
        if self.max_lr_cuts < 0:
            problems.append(f"field 'max_lr_cuts' must be >= 0, got {self.max_lr_cuts!r}")
        if problems:
            raise ConfigError("; ".join(problems), fix="correct the TreatmentConfig fields listed")


LR_CUT_CAUSE = "attention_logits"
"""The ledger's cause for the treatment's LR cut (one per cause; later cuts replace it cumulatively)."""


class PrecursorTreatment:
    """QK-clip + LR cut, decided on the host from one step's precursor values.

    Args:
        config: thresholds and bounds.
    """

    def __init__(self, config: TreatmentConfig | None = None) -> None:
        self.config = config or TreatmentConfig()
        self._clip_steps: deque[int] = deque()
        self.lr_cuts = 0
        self.lr_factor = 1.0
        self._last_cut: int | None = None
        self._own = 1.0  # the factor of this treatment's own ledger cut (LR_CUT_CAUSE)
        cfg = self.config
        self._growth = None if cfg.growth_factor is None else \
            LogitGrowth(window=cfg.growth_window, factor=cfg.growth_factor, floor=cfg.growth_floor)

    def treat(self, step: int, probes, head_max: list[list[float]], ledger=None) -> list[dict[str, Any]]:
        """Act on step ``step``'s per-head maxima; returns the event records (empty: nothing done).

        Args:
            step: the step just taken.
            probes: the attention probes (their weights are rescaled in place).
            head_max: per probe, the per-head largest logit of the step (host floats).
            ledger: the guard's :class:`~lossguard.recovery.ledger.RunLedger` for the LR cut
                (None: the cut is only recorded in :attr:`lr_factor` for the caller to apply).
        """
        from ..techniques.qk_clip import qk_clip_

        cfg = self.config
        finite = [m for heads in head_max for m in heads if math.isfinite(m)]
        largest = max(finite) if finite else math.nan
        grew = self._growth.update(step, largest) if self._growth is not None else None
        hot = [(li, h, m) for li, heads in enumerate(head_max) for h, m in enumerate(heads) if m > cfg.tau]
        if not hot and grew is None:
            return []
        while self._clip_steps and self._clip_steps[0] <= step - cfg.window:
            self._clip_steps.popleft()
        events: list[Any] = []
        if hot and len(self._clip_steps) < cfg.max_clip_steps:
            self._clip_steps.append(step)
            heads = qk_clip_(probes, head_max, cfg.tau) if cfg.clip else []
            if heads:
                events.append({"step": step, "event": "qk_clip", "tau": cfg.tau,
                               "heads": [c.to_dict() for c in heads],
                               "evidence": f"{len(heads)} head(s) with largest attention logit above "
                                           f"tau={cfg.tau:g} (max {max(c.max_logit for c in heads):.4g})"})
        spent = bool(hot) and len(self._clip_steps) >= cfg.max_clip_steps and largest > cfg.escape * cfg.tau
        if (spent or grew is not None) and self.lr_cuts < cfg.max_lr_cuts \
                and self.lr_factor > cfg.min_lr_factor \
                and (self._last_cut is None or step - self._last_cut >= cfg.cut_gap):
            cut = cfg.lr_cut_factor
            if grew is not None:  # sized to the growth rate (see growth_target)
                cut = min(cut, max(cfg.min_cut_factor, math.log(cfg.growth_target) / math.log(grew)))
            cut = max(cut, cfg.min_lr_factor / self.lr_factor)
            self.lr_cuts += 1
            self.lr_factor *= cut
            self._last_cut = step
            onset = self._growth.onset if self._growth is not None else None
            # A fresh clip budget at the new LR: without it the heads would grow unclipped while
            # the cut takes effect (measured: to 448 from 115 in 80 steps at LR 0.1, issue 20's model).
            self._clip_steps.clear()
            if self._growth is not None:
                self._growth.restart()
            evidence = ((f"attention logits above tau={cfg.tau:g} on {cfg.max_clip_steps} of the last "
                         f"{cfg.window} steps, clipping not holding them" if spent else
                         f"largest attention logit growing {grew:.3g}x per {cfg.growth_window} steps "
                         f"since step {onset}")
                        + f" (largest {largest:.4g}): the LR is too high for this model; "
                          f"LR cut {self.lr_cuts} of {cfg.max_lr_cuts}")
            if grew is not None and cfg.rollback and ledger is not None and onset is not None:
                # For the guard's executor: roll back to before the growth, LR x cut from there.
                from ..recovery.update_jump import jump_decision
                events.append(jump_decision(step=step, onset=onset, cut=cut, evidence=evidence, rollback=True,
                                            numbers={"trigger": LR_CUT_CAUSE, "largest_logit": round(largest, 4)}))
            else:
                self._own *= cut
                if ledger is not None:
                    from ..recovery.ledger import LrCut
                    ledger.set_lr_cut(LrCut(start_step=step + 1, until_step=None, factor=self._own,
                                            cause=LR_CUT_CAUSE))
                    ledger.save()
                events.append({"step": step, "event": "lr_cut", "factor": self._own, "cause": LR_CUT_CAUSE,
                               "evidence": evidence})
        for e in events:  # the key every guard decision record has (a Decision carries its own reasons)
            if isinstance(e, dict):
                e["reasons"] = [e["evidence"]]
        return events

    def respond(self, step: int, monitor, values: list[float], ledger=None,
                lr: float = float("nan")) -> list[dict[str, Any]]:
        """The guard's responder interface: :meth:`treat` on the monitor's per-head values."""
        return self.treat(step, monitor.probes, monitor.heads(values), ledger)

    def state_dict(self) -> dict[str, Any]:
        """The clip budget and LR-cut count (JSON-safe)."""
        return {"clip_steps": list(self._clip_steps), "lr_cuts": self.lr_cuts, "lr_factor": self.lr_factor,
                "last_cut": self._last_cut, "own": self._own,
                "growth": self._growth.state_dict() if self._growth is not None else None}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output. The clip window is restored as saved (it rolls back with
        the weights); the LR-cut budget only grows: a rollback to an older checkpoint does not give
        back cuts already made (a fresh process starts from 0, so it takes the saved count)."""
        self._clip_steps = deque(int(s) for s in sd["clip_steps"])
        if self._growth is not None:
            self._growth.load_state_dict(sd.get("growth"))
        if int(sd["lr_cuts"]) >= self.lr_cuts:
            self.lr_cuts, self.lr_factor, self._last_cut = int(sd["lr_cuts"]), float(sd["lr_factor"]), sd["last_cut"]
            self._own = float(sd.get("own", self.lr_factor))
