"""WholeLogFinding: evidence only a view of the whole log has, handed to the policy when it has it.

The live guard decides from one step at a time. The analyser (and ``lossguard simulate`` run from
the command line, which classifies the log too) sees the whole log, and some faults show only
there. The rule is written once, here and in :meth:`RecoveryPolicy.observe_finding`: such a finding
is *evidence given to the same policy*, which decides about it with its own budgets and words, so
``analyze`` and ``simulate`` name the same action at the same step. Where a live guard can gather
the same evidence it does, and the finding is marked ``live``; the rest are the one documented
difference between the analyser and a live guard (:meth:`WholeLogFinding.unseen_live` says why):

- **repeated data after a resume** (``repeated_data``, seen live): the data loader restarted from
  an earlier position when the run was resumed, so the model trains on data it has seen (a guard
  with a sampler restores the data position exactly; a loader outside it may not). It shows as a
  loss lower than the trend for the length of the replayed data, which no per-step outlier test
  flags, but the level test at a resume (:func:`lossguard.detect.resume.repeated_after`) does -- and
  a live guard knows its resumes and sees every loss after them, so it runs that same test
  (:mod:`lossguard.recovery.resume_watch`). Both decide at the point where the test has its evidence
  (the ``level_points``-th loss after the resume). The policy answers with a rollback to the
  checkpoint the resume started from (distance 0: the checkpoint is fine, the resume was not),
  skipping no data. Repeated data found from a log's sample-id columns is not seen live (the guard
  does not read them).
- **a change of regime** (``regime_change``): the loss's noise and level moved together and stayed
  (the Mixtral log's step 3200): the data or the loss changed underneath the run. It shows only
  against the whole log's noise before and after; no single step is an outlier, so a live guard
  never withholds one. The policy answers with a rollback the recipe's distance before the onset,
  skipping no data (which data is unknown: the pipeline must be checked first).
- **an fp16 loss-scale collapse** (``loss_scale_collapse``): a live guard with a GradScaler checks
  the scale every step; the replay over a log feeds the policy only the bad steps, so the
  analyser's collapse stands in for those checks, and the policy answers as those checks do: a
  full loss-scale reset (numerics, not data: nothing skipped, nothing rolled back; the withheld
  NaN steps around it still open an episode of their own).
- **a short log's verdict** (``short_log``: a divergence or a spike without recovery found by the
  relative rules of :mod:`lossguard.classify.short`): with fewer points than the judge's window a
  live guard would not yet be warm, so it says nothing; the whole (short) log does. A climb is the
  loss-rise rule's case (a rollback and the decisive LR cut from the turn on); a jump that stays up
  is a bad-data spike (a rollback skipping the spike's batches plus the margin).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .action import Action
from .suspect import Suspect

__all__ = ["WHOLE_LOG_KINDS", "SHORT_LOG_KINDS", "WholeLogFinding"]

WHOLE_LOG_KINDS = ("repeated_data", "regime_change", "loss_scale_collapse")
"""Incident kinds (their string values) that are whole-log evidence for the policy."""
SHORT_LOG_KINDS = ("divergence", "spike_no_recovery")
"""Incident kinds that are whole-log evidence when a short log's relative rules found them."""


@dataclass(frozen=True, kw_only=True)
class WholeLogFinding:
    """One whole-log finding, as the policy reads it."""

    kind: str
    """The incident kind's value (one of :data:`WHOLE_LOG_KINDS` or :data:`SHORT_LOG_KINDS`)."""
    step: int
    """The step the policy decides at (the analyser's onset)."""
    onset: int
    """First step of the finding."""
    peak: int | None = None
    """Step of the finding's peak (a short log's spike: the last batch it skips)."""
    short_log: bool = False
    """Found by a short log's relative rules (:data:`SHORT_LOG_KINDS`)."""
    live: bool = False
    """A live guard gathers this evidence too, at the same step (repeated data by the level test at a
    resume: :mod:`lossguard.recovery.resume_watch`)."""

    def unseen_live(self) -> str | None:
        """None when a live guard gets this evidence too; else the rule that separates the analyser's
        answer from a live guard's, in words (the one place it is written)."""
        if self.live:
            return None
        if self.kind == "repeated_data":
            return "repeated data found from the log's sample-id columns, which a live guard does not read"
        if self.short_log:
            return "a short log's relative rule: a live guard is not warm yet with so few points"
        return {"regime_change": "a change of regime shows only against the whole log's noise before and after",
                "loss_scale_collapse": "a loss-scale collapse found in the whole log stands in for the live "
                                       "guard's per-step scale checks"}.get(self.kind, "whole-log evidence")

    def answer(self, *, margin: int) -> tuple[dict[str, Any], list[str]] | None:
        """The numbers and reasons of the policy's decision for this finding (None: no action). The
        decision is a rollback unless ``numbers["action"]`` names another :class:`Action`.

        Args:
            margin: the recipe's skip margin for this run (batches skipped past a spike).
        """
        onset = int(self.onset)
        if self.kind == "repeated_data":
            return ({"onset": onset, "rollback_distance": 0, "cause": "repeated_data",
                     "suspect": Suspect.DATA_POSITION.value},
                    [f"the data loader restarted from an earlier position at the resume at step {onset}: the low "
                     "loss is memorised data, and the model is being trained on it twice (the first losses after the "
                     "resume sit below the trend before it)",
                     "restore the checkpoint the resume started from and resume again with the data position saved "
                     "in it; check the data loader state is saved and restored (`lossguard verify-resume`)"])
        if self.kind == "regime_change":
            return ({"onset": onset, "cause": "regime_change", "suspect": Suspect.DATA.value},
                    [f"the loss changed regime at step {onset} (its noise and level moved together and stayed): "
                     "the data or the loss changed underneath the run (whole-log evidence)",
                     "check the data pipeline (shards, mixture, tokenizer) and the loss at the onset first, then "
                     "restore a checkpoint from before it; no data is skipped, since which data is unknown"])
        if self.kind == "loss_scale_collapse":
            return ({"onset": onset, "cause": "loss_scale_collapse", "suspect": Suspect.NUMERICS.value,
                     "action": Action.LOSS_SCALE_RESET.value},
                    [f"the fp16 loss scale collapsed from step {onset}: most updates are being skipped (whole-log "
                     "evidence); once the optimizer state is checked finite, reset the loss scale and its growth "
                     "tracker (numerics, not data: nothing skipped)"])
        if not self.short_log:
            return None
        if self.kind == "divergence":
            return ({"onset": onset, "cause": "loss_rising", "suspect": Suspect.OPTIMIZER.value},
                    [f"the loss climbs from its lowest point at step {onset} to the end of a short log (relative "
                     "rule, whole-log evidence): the optimisation is unstable; skipping data will not help"])
        if self.kind == "spike_no_recovery":
            end = int(self.peak if self.peak is not None else onset) + 1
            return ({"onset": onset, "cause": "spike", "suspect": Suspect.DATA.value,
                     "skip_batches": [onset, end + int(margin)]},
                    [f"the loss jumped at step {onset} and had not come back by the end of a short log (relative "
                     "rule, whole-log evidence): restore from before it and skip the spike's batches"])
        return None
