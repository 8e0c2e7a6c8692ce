"""WholeLogFinding: evidence only a view of the whole log has, handed to the policy when it has it.

The live guard decides from one step at a time. The analyser (and ``lossguard simulate`` run from
the command line, which classifies the log too) sees the whole log, and some faults show only
there. The rule is written once, here and in :meth:`RecoveryPolicy.observe_finding`: such a finding
is *evidence given to the same policy*, which decides about it with its own budgets and words, so
``analyze`` and ``simulate`` name the same action at the same step. The live guard never gets these
findings -- the only place the three may differ, and why:

- **repeated data after a resume** (``repeated_data``): the data loader restarted from an earlier
  position when the run was resumed, so the model trains on data it has seen. A live guard resumes
  through its own TrainState, which restores the data position exactly, so it cannot happen under
  the guard; in a log it shows only as a loss lower than the trend for the length of the replayed
  data, which no per-step test flags. The policy answers with a rollback to the checkpoint the resume
  started from (distance 0: the checkpoint is fine, the resume was not), skipping no data.
- **a change of regime** (``regime_change``): the loss's noise and level moved together and stayed
  (the Mixtral log's step 3200): the data or the loss changed underneath the run. It shows only
  against the whole log's noise before and after; no single step is an outlier, so a live guard
  never withholds one. The policy answers with a rollback the recipe's distance before the onset,
  skipping no data (which data is unknown: the pipeline must be checked first).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WHOLE_LOG_KINDS", "WholeLogFinding"]

WHOLE_LOG_KINDS = ("repeated_data", "regime_change")
"""Incident kinds (their string values) that are whole-log evidence for the policy."""


@dataclass(frozen=True, kw_only=True)
class WholeLogFinding:
    """One whole-log finding, as the policy reads it."""

    kind: str
    """The incident kind's value (one of :data:`WHOLE_LOG_KINDS`)."""
    step: int
    """The step the policy decides at (the analyser's onset: the resume)."""
    onset: int
    """First step of the finding."""
