"""Recovery plans: for each incident, what the guard's recovery policy decides about it.

There is one decision function, :class:`lossguard.recovery.RecoveryPolicy`. ``analyze`` replays it
over the log exactly as ``lossguard simulate`` and the live guard run it (the same judge, policy,
rollback resolver and words: :func:`lossguard.simulate.simulate`), with the analyser's whole-log
findings as extra evidence (:mod:`lossguard.recovery.finding`: the only place where the analyser
may know more than a live guard). :func:`make_plans` then files each decision under the incident it
is about. So the plan's first heavy action (rollback, LR cut, halt) is the guard's, at the same step,
with the same reasons; an incident the policy does not act on gets advice in words only
(:data:`ADVICE`) and the number of updates the guard would have withheld in it.

Cost: linear in incidents and decisions (a binary search per decision), so a log with hundreds of
incidents plans in milliseconds (``benchmarks/analyze_speed.py``).
"""
from __future__ import annotations

import bisect
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .checkpoint.names import checkpoint_step
from .classify.incident import Incident, IncidentKind as K
from .classify.short import RELATIVE_RULE
from .errors import LossguardError, raise_all
from .guard.config import GuardConfig
from .recovery.action import Action
from .recovery.finding import SHORT_LOG_KINDS, WHOLE_LOG_KINDS, WholeLogFinding
from .recovery.recipe import RecoveryRecipe
from .recovery.skip_range import SkipRange

HEAVY = frozenset((Action.ROLLBACK.value, Action.LR_CUT.value, Action.HALT.value))
"""The decisions that change a run's future enough to count as *heavy* (skips and loss-scale resets do not)."""
# Record words, looked up once (an enum's .value is a descriptor call: planning reads them per decision).
_SKIP, _ROLLBACK = Action.SKIP.value, Action.ROLLBACK.value
_FOLLOW_UPS = frozenset((Action.LR_CUT.value, Action.LOSS_SCALE_RESET.value))


@dataclass
class RecoveryPlan:
    """The policy's decision about one incident, with its reasons.

    Attributes:
        incident: index of the incident in :attr:`lossguard.analysis.Analysis.incidents` (None for a
            decision of the policy that no incident explains).
        action: the first heavy decision (:attr:`Action.ROLLBACK`, :attr:`Action.LR_CUT`,
            :attr:`Action.HALT`), else :attr:`Action.WATCH` or :attr:`Action.NONE`.
        step: the step the policy decided at (None when it did not act).
        rollback_to_step: checkpoint step to restore (None when no rollback is decided).
        checkpoint_exists: True when ``rollback_to_step`` is a checkpoint known to exist
            (``--checkpoints`` was given), False when it is one assumed at every ``checkpoint_every``.
        skip_batches: batch indices (= optimizer steps) to skip after restoring, half-open, or None.
        lr_factor: multiply the LR by this after restoring (1.0 = unchanged).
        reset_loss_scale: reset the fp16 loss scale (and its growth tracker) after restoring.
        reasons: the reasons, in words (for a decision: the policy's own, as the guard logs them).
        decisions: the policy's decision records filed under this incident (as ``simulate`` writes them).
        skipped_steps: steps whose update the guard would withhold in this incident.
    """

    incident: int | None
    action: Action
    step: int | None = None
    rollback_to_step: int | None = None
    checkpoint_exists: bool = False
    skip_batches: SkipRange | None = None
    lr_factor: float = 1.0
    reset_loss_scale: bool = False
    reasons: list[str] = field(default_factory=list)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    skipped_steps: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``action`` as its string, ``skip_batches`` as ``[start, stop]``, half-open)."""
        d = asdict(self)
        d["action"] = self.action.value
        d["skip_batches"] = self.skip_batches.to_json() if self.skip_batches else None
        return d


@dataclass(kw_only=True)
class PlanConfig:
    """Which policy plans: the guard's, with this recipe."""

    recipe: RecoveryRecipe = field(default_factory=RecoveryRecipe)
    """Rollback distance, skip margin, LR cut, loss-scale reset -- the guard's own recipe."""
    guard: GuardConfig | None = None
    """The guard configuration whose policy decides (None: the guard's defaults with ``recipe``;
    when given, its recipe is the plan's)."""

    def __post_init__(self) -> None:
        problems: list[str] = []
        if not isinstance(self.recipe, RecoveryRecipe):
            problems.append(f"recipe must be a RecoveryRecipe, got {type(self.recipe).__name__}")
        if self.guard is not None and not isinstance(self.guard, GuardConfig):
            problems.append(f"guard must be a GuardConfig or None, got {type(self.guard).__name__}")
        raise_all(problems)
        if self.guard is not None:
            self.recipe = self.guard.recipe

    def guard_config(self) -> GuardConfig:
        """The configuration the replay runs (the same object every call)."""
        if self.guard is None:
            self.guard = GuardConfig(recipe=self.recipe)
        return self.guard


def parse_checkpoints(spec: str | os.PathLike) -> list[int]:
    """Checkpoint steps from a directory (``checkpoint-1200``, ``iter_0001200``, ``step_1200``...;
    :func:`lossguard.checkpoint.names.checkpoint_step`) or a comma-separated list of steps.

    Raises:
        LossguardError: neither a directory with checkpoints nor a list of integers.
    """
    text = os.fspath(spec)
    path = Path(text)
    if path.is_dir():
        steps = sorted({s for p in path.iterdir() if (s := checkpoint_step(p.name)) is not None})
        if not steps:
            raise LossguardError("no checkpoint sub-directories found (looked for names like checkpoint-1200, "
                                 "iter_0001200, step_1200)", path=text,
                                 fix="point --checkpoints at the directory that holds them, "
                                     "or list the steps: 1000,2000")
        return steps
    try:
        return sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError:
        raise LossguardError(f"--checkpoints {text!r} is neither a directory nor a comma-separated list of steps",
                             fix="pass a checkpoint directory or steps like 1000,2000,3000") from None


def findings(incidents: Sequence[Incident]) -> list[WholeLogFinding]:
    """The incidents that are whole-log evidence for the policy (:mod:`lossguard.recovery.finding`)."""
    out = []
    for i in incidents:
        short = i.details.get("rule") == RELATIVE_RULE and i.kind.value in SHORT_LOG_KINDS
        if short or i.kind.value in WHOLE_LOG_KINDS:
            out.append(WholeLogFinding(kind=i.kind.value, step=i.onset, onset=i.onset, peak=i.peak, short_log=short))
    return out


ADVICE = {
    K.SPIKE_FAST: "The loss came back by itself within the fast budget.",
    K.SPIKE_SLOW: "The spike took many steps to recover: check the data around the onset.",
    K.SPIKE_NO_RECOVERY: "The loss never came back to its pre-spike level: check what changed at the onset.",
    K.DIVERGENCE: "The loss trend turned upward: lower the LR (or lengthen warm-up) if it keeps rising; "
                  "skipping data does not help a divergence that has no spike.",
    K.LEVEL_SHIFT: "The loss moved to a higher level and stayed: check what changed at that step "
                   "(data shard or mix, LR schedule, a resumed optimizer state).",
    K.STREAM_SPIKE: "Only some stream(s) spiked: inspect that stream's data around the onset.",
    K.RESUME_SPIKE: "A bump right after a resume that recovered: often optimizer state, RNG or data position "
                    "not restored exactly. Run `lossguard verify-resume` before the next long run.",
    K.REPEATED_DATA: "The data loader restarted from an earlier position at the resume: check its state is saved "
                     "and restored (`lossguard verify-resume`).",
    K.NON_FINITE: "A NaN/Inf loss or gradient: the guard withholds such an update (weights and Adam moments "
                  "stay finite).",
    K.LOSS_SCALE_COLLAPSE: "The fp16 loss scale collapsed: check the optimizer state is finite, then reset the "
                           "loss scale and its growth tracker.",
    K.GRAD_NORM_SPIKE: "The grad norm spiked while the loss held: tighter clipping or a lower LR if it repeats.",
    K.REGIME_CHANGE: "The loss changed regime (noise and level moved together and stayed): check the data "
                     "pipeline and the loss at the onset.",
    K.SUDDEN_DROP: "A steep improvement after a slow stretch (grokking-like). Worth a check that it is not an "
                   "evaluation or data bug (e.g. repeated or leaked data).",
    K.STALL: "The run stalled on a plateau instead of converging: the steps there were mostly wasted. For the next "
             "run (or from a checkpoint before the plateau) lower the peak LR (e.g. 0.3x) or lengthen the warm-up; "
             "where the attention logits grew, add QK-LayerNorm and z-loss (lossguard.techniques.qk_norm), or keep "
             "the model and let the guard's PrecursorTreatment clip them (QK-clip, then an LR cut). Without the "
             "attention logits in the log, StabilityGuard(..., precursors=True) records them.",
    K.UPDATES_STOPPED: "No update was applied for a long stretch: the run logged but did not train. Find why every "
                       "step was skipped (non-finite gradients under bf16/fp16, a loss scale at its minimum, a "
                       "guard withholding every step) before spending more compute.",
}
"""Advice in words for an incident the policy does not act on (never an action of its own)."""


def _actions(decisions: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The heavy decisions, each with its follow-ups (the LR cut / loss-scale reset a rollback brings)."""
    out: list[list[dict[str, Any]]] = []
    for d in decisions:
        ev = d["event"]
        follows = out and ev in _FOLLOW_UPS and out[-1][0]["event"] == _ROLLBACK \
            and d["step"] == out[-1][0].get("to_step")
        if follows:
            out[-1].append(d)
        elif ev in HEAVY:
            out.append([d])
    return out


def _owner(starts: list[int], step: int) -> int:
    """Index of the incident a decision at ``step`` is about: the latest one begun by then (the
    first one when the decision comes before any)."""
    return max(bisect.bisect_right(starts, step) - 1, 0)


def make_plans(incidents: Sequence[Incident], decisions: Sequence[dict[str, Any]], *,
               checkpoints_known: bool = False) -> list[RecoveryPlan]:
    """One plan per incident (same order), plus one per policy decision that no incident explains.

    Args:
        incidents: the analysis's incidents, in onset order.
        decisions: the replayed policy's decision records (:attr:`Simulation.decisions`).
        checkpoints_known: the replay ran against checkpoints that exist (``--checkpoints``).
    """
    order = sorted(range(len(incidents)), key=lambda i: incidents[i].onset)
    starts = [incidents[i].onset for i in order]
    none, watch, drop = Action.NONE, Action.WATCH, K.SUDDEN_DROP
    plans = [RecoveryPlan(incident=i, action=none if inc.kind is drop else watch) for i, inc in enumerate(incidents)]
    orphans: list[RecoveryPlan] = []
    for d in decisions:  # withheld updates, filed under their incident
        if d["event"] == _SKIP and incidents:
            plans[order[_owner(starts, int(d["step"]))]].skipped_steps.append(int(d["step"]))
    for d in decisions:  # a loss-scale reset of its own (not a rollback's follow-up), filed the same way
        if d["event"] == Action.LOSS_SCALE_RESET.value and d.get("cause") and incidents:
            p = plans[order[_owner(starts, int(d.get("onset", d["step"])))]]
            p.reset_loss_scale = True
            p.reasons += list(d.get("reasons", []))
    for group in _actions(decisions):
        head = group[0]
        at = int(head.get("onset", head["step"]))
        if incidents:
            p = plans[order[_owner(starts, at)]]
        else:
            p = RecoveryPlan(incident=None, action=Action.WATCH)
            orphans.append(p)
        p.decisions.extend(group)
        if p.step is None:
            _adopt(p, group, checkpoints_known)
    for p, inc in zip(plans, incidents, strict=True):
        if p.step is None:
            p.reasons.append(ADVICE.get(inc.kind, ""))
            if p.skipped_steps:
                s = p.skipped_steps
                p.reasons.append(f"The guard would withhold the update of {len(s)} step(s) ({_steps(s)}) and go on: "
                                 "no rollback, LR cut or halt.")
    return plans + orphans


def _adopt(p: RecoveryPlan, group: list[dict[str, Any]], checkpoints_known: bool) -> None:
    """Make the plan the policy's first heavy decision about its incident (same words)."""
    head = group[0]
    p.action, p.step = Action(head["event"]), int(head["step"])
    p.reasons = list(head.get("reasons", []))
    if p.action is Action.ROLLBACK:
        p.rollback_to_step = head.get("to_step")
        p.checkpoint_exists = checkpoints_known and p.rollback_to_step is not None
        sb = head.get("skip_batches")
        p.skip_batches = SkipRange.from_json(sb) if sb else None
    for f in group[1:]:
        p.reasons += list(f.get("reasons", []))
        if f["event"] == Action.LR_CUT.value:
            p.lr_factor = float(f.get("factor", 1.0))
        elif f["event"] == Action.LOSS_SCALE_RESET.value:
            p.reset_loss_scale = True


def _steps(s: list[int]) -> str:
    return f"step {s[0]}" if len(s) == 1 else f"steps {s[0]}..{s[-1]}"
