"""PolicyConfig: the recovery ladder's budgets and escalation rules, plus the recipe.

:class:`lossguard.guard.GuardConfig` extends it with the judge's and the executor's settings, so a
guard and ``lossguard simulate`` built from the same GuardConfig run the same policy.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import raise_all
from .recipe import RecoveryRecipe


@dataclass(kw_only=True)
class PolicyConfig:
    """Settings of :class:`lossguard.recovery.RecoveryPolicy`."""

    recipe: RecoveryRecipe = field(default_factory=RecoveryRecipe)
    """What a rollback does: distance, skip margin, LR cut factor, loss-scale reset."""
    episode_gap: int = 20
    """Bad steps at most this many steps apart belong to one episode."""
    rollback_after: int = 3
    """Bad steps in one episode that make the guard roll back instead of skipping again.

    Is a rollback worth it when every bad step was withheld (the weights never saw them) and the
    loss is back on trend? Measured (issue 19, ``benchmarks/zoo.py --scenarios bad_pocket,lr_jump
    --scenario-seeds 0,1,2``, mlp tuned + lstm held out, 18 guarded runs each, against the same
    clean references): with no rollback on the count (``rollback_after=1000000``: skip every bad
    step, roll back only when the loss does not come back, the ``loss_rise`` rule) the bad-pocket runs
    ended worse -- mlp 17/18 within 2% of clean (median gap +0.21%) vs 18/18 (-0.02%) with 3, lstm
    16/18 (+1.59%) vs 17/18 (-0.31%): the rollback also undoes the updates of the pocket's batches
    that no test flagged and skips past the pocket's tail. On LR jumps the count-based rollbacks
    cost more than they gave on mlp (16/18 vs 12/18 within 2%; lstm 9/18 both). So 3 stays, and an
    episode the LR schedule explains is held back from rolling back instead (``lr_ramp_window``).

    An episode seen on the grad-norm tail test alone (no loss outlier) counts too. Holding its
    rollback (session 8, ``benchmarks/RESULTS.md``, "Healthy runs and the judge") changed no healthy
    zoo run and delayed an LR-jump rescue: a grad norm far beyond its tail on consecutive withheld
    steps -- other batches, unchanged weights -- says the weights are hurt before the loss does."""
    rollbacks_per_incident: int = 3
    """Rollbacks one *incident* may use: an episode plus its recurrences (the same place again after
    its data was skipped). The budget is per incident so that an unrelated early blip cannot spend
    a later rescue (issue 10: on the demo model, end-of-warm-up blips took two of three run-wide
    rollbacks and the LR jump at step 200 then halted). Three: skip the data, skip again (a
    recurrence), then the decisive LR cut (``recurrences_to_cut=2``)."""
    max_rollbacks: int = 10
    """Rollbacks allowed in the whole run, over all incidents: a safety net for a run that keeps
    failing in new places (it needs a human); one more rollback than this halts it."""
    lr_cut_steps: int = 200
    """Steps the mild LR cut (x ``recipe.lr_cut_factor``) lasts; then the schedule applies again."""
    lr_cut_from: int = 2
    """Cut the LR on the n-th rollback and every one after it (1 = every rollback, 0 = never)."""
    recurrence_window: int | None = None
    """An episode that needs a rollback and starts at most this many steps from the onset of the
    episode the previous rollback was for -- whose data that rollback skipped -- is a *recurrence*:
    the same place, different batches; evidence for an optimizer instability rather than bad data.
    None = ``episode_gap``. Keep it short: the replayed steps up to the onset are the same
    computation, so an instability of the weights / LR comes back at the same place (measured on
    the demo model: the very same step, in every seed), while a wider window mistakes the next,
    unrelated episode (a second data pocket) for a recurrence."""
    recurrences_to_cut: int = 2
    """Recurrences in a row at the same place before the LR is cut decisively. Two, not one: on the
    demo model an end-of-warm-up blip came back once on other data and then passed, and cutting 10x
    there cost +18..+30 % held-out loss. Re-measured in round 3 (``benchmarks/RESULTS.md``): 1 saves
    more zoo LR jumps (39 vs 34 of 72 tuned runs within 2%) but on the demo model it cuts healthy
    and bad-pocket runs after a warm-up blip (worst +17.4% and +30.0% over clean, 5 seeds).
    1 = cut at the first recurrence."""
    recurrence_lr_factor: float = 0.1
    """Multiply the LR by this when a recurrence is found (the cuts compound). One order of
    magnitude: a cut too small costs another rollback; too large only slows training. 1.0 disables
    the recurrence rule."""
    recurrence_lr_steps: int | None = None
    """Steps the recurrence cut lasts; None = the rest of the run (the OPT-175B remedy)."""
    loss_rise: float | None = 0.10
    """A loss that does not come back: once the loss baseline (the loss test's trailing median) has
    been tracked for ``loss_rise_after`` steps, a baseline more than this fraction above its lowest
    value so far means the loss is rising on new data -- an optimizer instability, not a bad batch
    (which skipping would cure, and the median would not even see). The guard then rolls back to
    before the lowest point and cuts the LR by ``recurrence_lr_factor`` for the rest of the run, at
    once, and says so (cause ``loss_rising``). 0.10: the largest rise of healthy runs of the tuned
    zoo families was 2.9% when this was set, and is 4.8% re-measured in round 3 (48 runs,
    ``benchmarks/zoo_calibrate.py``; the zoo's loop had since stopped drawing its loader seed from
    the global RNG, so dropout masks differ): a margin of 2.1x. None disables the rule."""
    loss_rise_after: int = 128
    """Steps with a loss baseline before the rise rule watches (the loss test's default window:
    before it is full the median still lags the fast early fall of the loss)."""
    loss_rise_lead: int = 32
    """The rise rule's LR cut starts this many steps before the baseline's lowest point: the loss
    test refreshes its baseline every ``stride`` (32) steps, so the rise may have begun up to that
    much earlier (measured on the zoo: cutting from the lowest point itself left 20 steps of a 30x
    LR in, and the loss rose again)."""
    lr_ramp_window: int = 20
    """A step is in the LR ramp when the LR rose at most this many steps before it
    (:mod:`lossguard.recovery.lr_phase`). An episode whose every bad step is in the ramp and whose
    only symptom is the grad norm (no loss outlier, nothing non-finite) is the LR schedule's doing
    (suspect ``lr_schedule``): the guard skips those steps (and clips, with ``max_grad_norm``) but
    neither rolls back nor skips data -- the next batches meet the same LR, and a rollback replays
    the same ramp. Issue 19: the demo GPT at 10x its LR with clipping, nothing injected, rolled back
    to step 0 in its warm-up and skipped 5% of its (good) data. 20 = ``episode_gap``: the ramp's
    influence ends where an episode would. Zoo (issue 19, mlp/cnn/encoder/lstm pocket and LR-jump
    runs, 3 seeds): the rollbacks, LR cuts and halts of 139 paired runs are unchanged by the rule;
    healthy mlp and lstm runs still see no heavy intervention (0/24). 0 disables the rule."""
    min_loss_scale: float = 1.0
    """A GradScaler scale below this is a collapse: reset it (if the optimizer state is finite)."""
    max_overflow_streak: int = 30
    """This many overflow steps in a row is a collapse too."""

    def problems(self) -> list[str]:
        """Every invalid field, one sentence each (empty when valid)."""
        p = []
        if not isinstance(self.recipe, RecoveryRecipe):
            p.append(f"recipe must be a RecoveryRecipe, got {type(self.recipe).__name__}")
        for name in ("episode_gap", "rollback_after", "max_overflow_streak", "lr_cut_steps", "recurrences_to_cut"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                p.append(f"{name} must be an integer >= 1, got {getattr(self, name)!r}")
        if not isinstance(self.rollbacks_per_incident, int) or self.rollbacks_per_incident < 1:
            p.append(f"rollbacks_per_incident must be an integer >= 1, got {self.rollbacks_per_incident!r}")
        for name in ("max_rollbacks", "lr_cut_from"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                p.append(f"{name} must be an integer >= 0, got {getattr(self, name)!r}")
        if self.recurrence_window is not None and self.recurrence_window < 0:
            p.append(f"recurrence_window must be >= 0 or None, got {self.recurrence_window}")
        if not isinstance(self.recurrence_lr_factor, (int, float)) or not 0 < self.recurrence_lr_factor <= 1:
            p.append(f"recurrence_lr_factor must be in (0, 1], got {self.recurrence_lr_factor!r}")
        if self.recurrence_lr_steps is not None and self.recurrence_lr_steps < 1:
            p.append(f"recurrence_lr_steps must be >= 1 or None, got {self.recurrence_lr_steps}")
        if self.loss_rise is not None and not (isinstance(self.loss_rise, (int, float)) and self.loss_rise > 0):
            p.append(f"loss_rise must be > 0 or None, got {self.loss_rise!r}")
        if not isinstance(self.lr_ramp_window, int) or self.lr_ramp_window < 0:
            p.append(f"lr_ramp_window must be an integer >= 0, got {self.lr_ramp_window!r}")
        if not isinstance(self.loss_rise_lead, int) or self.loss_rise_lead < 0:
            p.append(f"loss_rise_lead must be an integer >= 0, got {self.loss_rise_lead!r}")
        if not isinstance(self.loss_rise_after, int) or self.loss_rise_after < 1:
            p.append(f"loss_rise_after must be an integer >= 1, got {self.loss_rise_after!r}")
        if not isinstance(self.min_loss_scale, (int, float)) or not self.min_loss_scale >= 0:
            p.append(f"min_loss_scale must be >= 0, got {self.min_loss_scale!r}")
        return p

    def __post_init__(self) -> None:
        raise_all(self.problems(), fix="correct the field(s) named above")
