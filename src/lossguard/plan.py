"""Recovery plans: what the OPT, PaLM and WeLM teams did by hand, suggested for each incident.

Every recovery concept comes from :mod:`lossguard.recovery`, the same definitions the live guard
uses: the recipe (:class:`RecoveryRecipe`), the rollback target (:func:`choose_checkpoint`: the
newest checkpoint at step <= max(onset - rollback_distance, 0)), the skipped data (an
:class:`Episode`'s :meth:`~Episode.skip_range`, half-open ``[onset, last bad batch + 1 +
skip_margin)`` with batch index == step) and the :class:`Action`. Plans are suggestions with
reasons, never executed here; the guard (:mod:`lossguard.guard`) carries them out in a live run.
"""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .classify.incident import Incident, IncidentKind as K
from .errors import LossguardError, raise_all
from .recovery.action import Action
from .recovery.checkpoint_choice import choose_checkpoint, rollback_limit
from .recovery.episode import Episode
from .recovery.recipe import RecoveryRecipe
from .recovery.skip_range import SkipRange


@dataclass
class RecoveryPlan:
    """A suggested recovery for one incident, with its reasons.

    Attributes:
        incident: index of the incident in :attr:`lossguard.analysis.Analysis.incidents`.
        action: :attr:`Action.NONE`, :attr:`Action.WATCH`, :attr:`Action.ROLLBACK` or
            :attr:`Action.HALT` (no checkpoint to roll back to: restart from scratch).
        rollback_to_step: checkpoint step to restore (None when no rollback is advised).
        checkpoint_exists: True when ``rollback_to_step`` is a checkpoint known to exist
            (``--checkpoints`` was given), False when it is only the step to look for.
        skip_batches: batch indices (= optimizer steps) to skip after restoring, half-open
            ``[start, stop)``, or None.
        lr_factor: multiply the LR by this after restoring (1.0 = unchanged).
        reset_loss_scale: reset the fp16 loss scale (and its growth tracker) after restoring.
        reasons: the reasons, in words, one sentence each.
    """

    incident: int
    action: Action
    rollback_to_step: int | None = None
    checkpoint_exists: bool = False
    skip_batches: SkipRange | None = None
    lr_factor: float = 1.0
    reset_loss_scale: bool = False
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``action`` as its string, ``skip_batches`` as ``[start, stop]``, half-open)."""
        d = asdict(self)
        d["action"] = self.action.value
        d["skip_batches"] = self.skip_batches.to_json() if self.skip_batches else None
        return d


@dataclass(kw_only=True)
class PlanConfig:
    """How plans are made: the shared recovery recipe, plus when spikes count as a cluster."""

    recipe: RecoveryRecipe = field(default_factory=RecoveryRecipe)
    """Rollback distance, skip margin, LR cut, loss-scale reset -- the guard's own recipe."""
    repeat_window: int = 2000
    """Spikes this close together (steps) count as repeated."""
    repeat_count: int = 3
    """...when there are at least this many."""

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.recipe, RecoveryRecipe):
            problems.append(f"recipe must be a RecoveryRecipe, got {type(self.recipe).__name__}")
        if self.repeat_window < 0:
            problems.append(f"repeat_window must be >= 0, got {self.repeat_window}")
        if self.repeat_count < 2:
            problems.append(f"repeat_count must be >= 2, got {self.repeat_count}")
        raise_all(problems)


_CKPT = re.compile(r"(?:checkpoint|iter|step|global_step|ckpt)[-_=]?0*(\d+)", re.IGNORECASE)
# Checkpoints still being written (or left by a killed writer) are not restorable: lossguard's own
# store writes ``.tmp-step-N-...``, HF Trainer ``tmp-checkpoint-N``.
_IN_PROGRESS = re.compile(r"^(?:\.|tmp)", re.IGNORECASE)


def parse_checkpoints(spec: str | os.PathLike) -> list[int]:
    """Checkpoint steps from a directory (``checkpoint-1200``, ``iter_0001200``, ``step_1200``...)
    or a comma-separated list of steps.

    Raises:
        LossguardError: neither a directory with checkpoints nor a list of integers.
    """
    text = os.fspath(spec)
    path = Path(text)
    if path.is_dir():
        steps = sorted({int(m.group(1)) for p in path.iterdir()
                        if not _IN_PROGRESS.match(p.name) and (m := _CKPT.search(p.name))})
        if not steps:
            raise LossguardError("no checkpoint sub-directories found (looked for names like checkpoint-1200, "
                                 "iter_0001200, step_1200)", path=text,
                                 fix="point --checkpoints at the directory that holds them, or list the steps: 1000,2000")
        return steps
    try:
        return sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError:
        raise LossguardError(f"--checkpoints {text!r} is neither a directory nor a comma-separated list of steps",
                             fix="pass a checkpoint directory or steps like 1000,2000,3000") from None


def _rollback(onset: int, cfg: PlanConfig, checkpoints: Sequence[int] | None) -> tuple[int | None, bool, str]:
    dist = cfg.recipe.rollback_distance
    if checkpoints is None:
        step = rollback_limit(onset, dist)
        return step, False, (f"restore the newest checkpoint at or before step {step} "
                             f"(at least {dist} steps before the onset at {onset}).")
    step = choose_checkpoint(onset, checkpoints, dist)
    if step is not None:
        return step, True, f"restore checkpoint {step}, the newest at least {dist} steps before the onset at {onset}."
    return None, False, (f"no checkpoint at least {dist} steps before the onset at {onset} (a newer one may carry "
                         "the damage already): the run has to restart from scratch.")


def _episode(inc: Incident) -> Episode:
    """The incident as an episode: batch index == step; the last bad batch is its end (or peak)."""
    last = inc.end if inc.end is not None else inc.peak
    ep = Episode.open(inc.onset, inc.onset)
    if last > inc.onset:
        ep.add(last, last)
    return ep


def plan_for(index: int, inc: Incident, incidents: Sequence[Incident], cfg: PlanConfig,
             checkpoints: Sequence[int] | None, run_steps: int | None = None) -> RecoveryPlan:
    """The suggested recovery for one incident (``run_steps``, the log's length, bounds the skip
    margin: :meth:`RecoveryRecipe.margin_for`)."""
    p = RecoveryPlan(incident=index, action=Action.WATCH)
    kind = inc.kind
    loss_spikes = (K.SPIKE_FAST, K.SPIKE_SLOW, K.SPIKE_NO_RECOVERY)
    # Spikes within the window *before* this one (inclusive): the cluster is planned once, at the
    # spike that completes it; later members point back to it.
    spikes = [i for i in incidents if i.kind in loss_spikes and 0 <= inc.onset - i.onset <= cfg.repeat_window]
    first = next((j for j, i in enumerate(incidents) if i.kind in loss_spikes and
                  sum(0 <= i.onset - o.onset <= cfg.repeat_window for o in incidents if o.kind in loss_spikes)
                  >= cfg.repeat_count and 0 <= inc.onset - i.onset <= cfg.repeat_window), None)
    repeated = kind in loss_spikes and len(spikes) >= cfg.repeat_count
    if repeated and first is not None and first != index:
        p.reasons.append(f"Part of the cluster of spikes planned at incident [{first + 1}].")
        return p

    def rollback(skip: bool, why: str) -> None:
        step, exists, how = _rollback(inc.onset, cfg, checkpoints)
        p.action = Action.ROLLBACK if step is not None else Action.HALT
        p.rollback_to_step, p.checkpoint_exists = step, exists
        p.reasons.append(why)
        p.reasons.append(how[0].upper() + how[1:])
        if skip and step is not None:
            margin = cfg.recipe.margin_for(run_steps)
            r = p.skip_batches = _episode(inc).skip_range(margin)
            scaled = "" if margin == cfg.recipe.skip_margin else (
                f", {cfg.recipe.max_skip_fraction:g} of the run's {run_steps} steps")
            p.reasons.append(f"Skip batches [{r.start}, {r.stop}) ({len(r)} batches): the episode's data plus a "
                             f"margin of {margin}{scaled} (PaLM skipped 200-500).")

    if kind == K.SPIKE_FAST and not repeated:
        p.reasons.append("The loss came back by itself within the fast budget; no action needed. "
                         "If it recurs, the guard's skip-step would have dropped this update.")
    elif repeated and all(i.kind == K.SPIKE_FAST for i in spikes):
        p.reasons.append(f"{len(spikes)} spikes within {cfg.repeat_window} steps, each back by itself within the fast "
                         f"budget: no rollback needed, but if they keep coming lower the LR (e.g. {cfg.recipe.lr_cut_factor:g}x) "
                         "or tighten gradient clipping; the guard's skip-step would have dropped these updates.")
    elif repeated:
        rollback(True, f"{len(spikes)} spikes within {cfg.repeat_window} steps, not all recovering fast: the run is "
                       "unstable at this LR.")
        p.lr_factor = cfg.recipe.lr_cut_factor
        p.reasons.append(f"Lower the LR to {cfg.recipe.lr_cut_factor:g}x for a while after restoring (repeated spikes).")
    elif kind == K.SPIKE_SLOW:
        rollback(True, "The spike took hundreds of steps to recover: those steps were wasted and the weights "
                       "may carry the damage.")
    elif kind == K.SPIKE_NO_RECOVERY:
        rollback(True, "The loss never came back to its pre-spike level.")
        if inc.details.get("turning_into_divergence"):
            p.lr_factor = cfg.recipe.lr_cut_factor
            p.reasons.append(f"It is turning into divergence: lower the LR to {cfg.recipe.lr_cut_factor:g}x after restoring.")
    elif kind == K.DIVERGENCE:
        rollback(False, "The loss trend turned upward and kept rising: the optimisation itself is unstable.")
        p.lr_factor = cfg.recipe.lr_cut_factor
        p.reasons.append(f"Lower the LR to {cfg.recipe.lr_cut_factor:g}x (or lengthen warm-up); skipping data will not help "
                         "a divergence that has no spike.")
    elif kind == K.LEVEL_SHIFT:
        rollback(True, "The loss moved to a higher level and stayed: check what changed at that step "
                       "(data shard or mix, LR schedule, a resumed optimizer state).")
    elif kind == K.STREAM_SPIKE:
        if inc.end is not None and inc.details.get("recovery") == K.SPIKE_FAST.value:
            p.reasons.append(f"Only stream(s) {', '.join(inc.streams)} spiked and recovered: inspect that stream's "
                             f"data around step {inc.onset}.")
        else:
            rollback(True, f"Only stream(s) {', '.join(inc.streams)} spiked: bad data in that stream is the "
                           "likely cause.")
    elif kind == K.RESUME_SPIKE:
        p.reasons.append("A bump right after a resume that recovered: often optimizer state, RNG or data position "
                         "not restored exactly. Run `lossguard verify-resume` before the next long run.")
    elif kind == K.REPEATED_DATA:
        # The resume itself is the fault, not the data: go back to the checkpoint the resume used (the
        # newest at or before it) and resume again with the right data position.
        # choose_checkpoint with distance 0: the newest checkpoint at or before the resume.
        step = choose_checkpoint(inc.onset, checkpoints, 0) if checkpoints is not None else inc.onset
        p.action = Action.ROLLBACK if step is not None else Action.HALT
        p.rollback_to_step, p.checkpoint_exists = step, checkpoints is not None and step is not None
        p.reasons.append("The data loader restarted from an earlier position at the resume: the low loss is "
                         "memorised data, and the model is being trained on it twice.")
        p.reasons.append(f"Restore the checkpoint the resume at step {inc.onset} started from"
                         + (f" (step {step})" if step is not None else " (none found before it)")
                         + " and resume again with the data position saved in it; check the data loader "
                         "state is saved and restored (`lossguard verify-resume`).")
    elif kind == K.NON_FINITE:
        rollback(True, "A NaN/Inf loss or gradient that reached the optimizer poisons the weights and both Adam "
                       "moments; restore state from before it.")
    elif kind == K.LOSS_SCALE_COLLAPSE:
        rollback(True, "The fp16 loss scale collapsed: most updates are being skipped.")
        p.reset_loss_scale = True
        p.reasons.append("After restoring, check the optimizer state is finite (a NaN-poisoned state is why scale "
                         "resets alone fail), then reset the loss scale and its growth tracker.")
    elif kind == K.GRAD_NORM_SPIKE:
        p.reasons.append("The grad norm spiked while the loss held: watch for a loss spike in the next steps; "
                         "tighter clipping or a lower LR if it repeats.")
    elif kind == K.REGIME_CHANGE:
        rollback(False, "The loss changed regime (its noise and level moved together and stayed): the data or the "
                        "loss changed underneath the run. Check the data pipeline and the loss at the onset first; "
                        "then restore from before it.")
    elif kind == K.UPDATES_STOPPED:
        p.action = Action.HALT
        p.reasons.append(f"No update was applied for {inc.details.get('steps')} steps: the run logged but did not "
                         "train. The weights are those from before the stretch, so no rollback is needed; find why "
                         "every step was skipped (non-finite gradients under bf16/fp16, a loss scale at its "
                         "minimum, a guard withholding every step) before spending more compute.")
    elif kind == K.SUDDEN_DROP:
        p.action = Action.NONE
        p.reasons.append("A steep improvement after a slow stretch (grokking-like). Worth a check that it is not "
                         "an evaluation or data bug (e.g. repeated or leaked data).")
    return p


def make_plans(incidents: Sequence[Incident], *, checkpoints: Sequence[int] | None = None,
               cfg: PlanConfig | None = None, run_steps: int | None = None) -> list[RecoveryPlan]:
    """One plan per incident, in the same order; ``run_steps`` (the log's length, when known)
    bounds the skip margin as it does in the guard."""
    cfg = cfg or PlanConfig()
    ck = sorted(checkpoints) if checkpoints is not None else None
    return [plan_for(i, inc, incidents, cfg, ck, run_steps) for i, inc in enumerate(incidents)]
