"""RecoveryRecipe: the PaLM / WeLM / OPT recovery recipe's numbers, one config for guard and plan.

The recipe (PaLM, Chowdhery et al. 2022, sec. 5.1; OPT-175B logbook; WeLM): restart from a
checkpoint about 100 steps before the spike, skip the episode's batches plus ~200-500 more, lower
the LR when the run keeps spiking, and reset the fp16 loss scale (only once the optimizer state is
known finite). :class:`lossguard.guard.GuardConfig` holds one (``recipe=``) and
:func:`lossguard.plan.make_plans` takes one: the plan an analysis writes is the one the guard runs.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..errors import raise_all


@dataclass(frozen=True, kw_only=True)
class RecoveryRecipe:
    """What a rollback does, in optimizer steps and data-stream batches."""

    rollback_distance: int = 100
    """Roll back to the newest checkpoint at least this many steps before the episode's onset
    (PaLM: ~100). See :func:`lossguard.recovery.choose_checkpoint`."""
    skip_margin: int = 200
    """Batches skipped after the episode's last bad batch (PaLM skipped 200-500), at most
    ``max_skip_fraction`` of the run when its length is known, never below ``min_skip_margin``
    (:meth:`margin_for`)."""
    max_skip_fraction: float = 0.05
    """The skip margin is at most this fraction of the run's steps. PaLM's 200-500 batches were
    0.1-0.2% of its run; on a 400-step run 200 batches are half of it, and where the framework cannot
    jump its loader (HF, Lightning: a skipped batch is a withheld update) that half goes untrained
    (issue 10: held-out HF GPT-2 runs ended 2-7% worse than clean after a correct rollback). 1.0
    keeps ``skip_margin`` whatever the run's length."""
    min_skip_margin: int = 20
    """The skip margin is never below this (nor above ``skip_margin``), however short the run. The
    guard rolls back after ``rollback_after`` (3) bad steps: it has seen the first batches of a
    bad-data region, not its end, and the margin is what covers the rest. ``max_skip_fraction``
    alone shrank it to 10 batches on a 200-step run, shorter than a 20-batch pocket (issue 23): the
    pocket's tail was read again, opened a new episode right after the skip and was taken for a
    recurrence (an LR cut on a healthy optimizer). 20 = ``episode_gap``, the distance over which
    bad steps count as one episode: a margin that long skips, at the least, everything the
    episode rule would still have joined to the episode. On runs of >= 400 steps the fraction
    already allows 20 or more, so only shorter runs change."""
    lr_cut_factor: float = 0.5
    """Multiply the LR by this when the recipe calls for an LR cut (repeated rollbacks, divergence,
    repeated spikes)."""
    reset_loss_scale: bool = True
    """Reset the fp16 GradScaler fully (scale and growth tracker) after a rollback, when the
    optimizer state is finite."""

    def __post_init__(self) -> None:
        p = []
        for name in ("rollback_distance", "skip_margin", "min_skip_margin"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                p.append(f"recipe.{name} must be an integer >= 0, got {v!r}")
        if not isinstance(self.max_skip_fraction, (int, float)) or not 0 < self.max_skip_fraction <= 1:
            p.append(f"recipe.max_skip_fraction must be in (0, 1], got {self.max_skip_fraction!r}")
        if not isinstance(self.lr_cut_factor, (int, float)) or not 0 < self.lr_cut_factor <= 1:
            p.append(f"recipe.lr_cut_factor must be in (0, 1], got {self.lr_cut_factor!r}")
        if not isinstance(self.reset_loss_scale, bool):
            p.append(f"recipe.reset_loss_scale must be true or false, got {self.reset_loss_scale!r}")
        raise_all(p, fix="correct the RecoveryRecipe field(s) named above")

    def margin_for(self, run_steps: int | None) -> int:
        """The skip margin of a run of ``run_steps`` steps: ``max_skip_fraction`` of the run, between
        ``min_skip_margin`` and ``skip_margin``; the full ``skip_margin`` when the run's length is
        unknown (None). An explicit ``skip_margin`` below the floor wins (it is the upper bound).

        With the defaults (200, 20, 5%): 200 steps -> 20, 400 -> 20, 1,000 -> 50, 4,000 and more ->
        200 (PaLM's 200-500 at 255k steps were 0.1-0.2% of the run; at 1M steps 200 is 0.02%)."""
        if not run_steps or run_steps <= 0:
            return self.skip_margin
        scaled = max(self.min_skip_margin, int(self.max_skip_fraction * run_steps))
        return min(self.skip_margin, max(1, scaled))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)
