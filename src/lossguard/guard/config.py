"""GuardConfig: every threshold and budget of the StabilityGuard, checked when it is built.

The defaults follow the PaLM / WeLM recipe scaled to a run checkpointed every 100 steps: skip a
bad step, roll back to a checkpoint >= 100 steps before an episode that does not settle, skip the
episode's batches plus 200 more, and stop after three rollbacks. An episode that comes back at the
same place twice after its data was skipped is taken for an optimizer instability: the LR is cut
10x for the rest of the run (the OPT-175B remedy: previous checkpoint, lower LR).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..detect.outlier import OutlierConfig
from ..errors import raise_all

GATES = ("auto", "host", "device")


@dataclass(kw_only=True)
class GuardConfig:
    """Settings of :class:`lossguard.guard.StabilityGuard` and its :class:`RecoveryPolicy`."""

    loss: OutlierConfig = field(default_factory=OutlierConfig)
    """Robust outlier test on the (global) training loss; the analyser's test, same defaults."""
    grad_norm: OutlierConfig | None = field(default_factory=OutlierConfig)
    """Outlier test on the global gradient norm (before clipping); None watches only the loss."""
    gate: str = "auto"
    """How a bad update is withheld. ``"device"``: the optimizer takes the verdict as a tensor and
    selects with ``torch.where`` (needs :class:`SkipStepAdamW` or any optimizer whose ``step``
    accepts ``gate=``; no host sync). ``"host"``: read the verdict once per step (one scalar
    transfer) and do not call ``optimizer.step()``. ``"auto"``: device when the optimizer supports it."""
    stats: str = "auto"
    """Where the outlier statistics run. ``"device"``: :class:`DeviceOutlier` tensors on the model's
    device (no host sync; the choice for GPUs). ``"host"``: the analyser's own
    :class:`OnlineOutlier` on floats read back each step (on a CPU the "device" is the host, and
    ~60 tiny tensor ops cost more than a few Python floats). ``"auto"``: host on CPU, else device.
    Both give the same verdicts as ``score()``, bit for bit."""
    shadow: bool = False
    """Report only: log what the guard would do, never withhold a step or roll back."""
    max_grad_norm: float | None = None
    """Clip the global gradient norm to this value (the guard measures the norm anyway)."""
    episode_gap: int = 20
    """Bad steps at most this many steps apart belong to one episode."""
    rollback_after: int = 3
    """Bad steps in one episode that make the guard roll back instead of skipping again."""
    rollback_distance: int = 100
    """Roll back to the newest checkpoint at least this many steps before the episode's onset."""
    skip_margin: int = 200
    """Batches skipped after the episode's last bad batch (PaLM skipped 200-500)."""
    max_rollbacks: int = 3
    """Rollbacks allowed in the whole run; one more episode that needs a rollback halts it."""
    lr_cut_factor: float = 0.5
    """Multiply the scheduled LR by this after a rollback from rollback number ``lr_cut_from``."""
    lr_cut_steps: int = 200
    """Steps the LR cut lasts (then the schedule applies unchanged again)."""
    lr_cut_from: int = 2
    """Cut the LR on the n-th rollback and every one after it (1 = every rollback, 0 = never)."""
    recurrence_window: int | None = None
    """An episode that needs a rollback and starts at most this many steps from the onset of the
    episode the previous rollback was for -- whose data that rollback skipped -- is a *recurrence*:
    the same place, different batches. That is evidence against bad data and for an optimizer
    instability (LR too high for the weights there), so the rollback also cuts the LR decisively
    (``recurrence_lr_factor``) instead of rolling back again with the same LR. None = ``episode_gap``:
    a recurrence is "the same episode again". Keep it short: the replayed steps up to the onset are
    the same computation, so an instability of the weights / LR comes back at the same place
    (measured on the demo model: the very same step, in every seed), while a wider window mistakes
    the next, unrelated episode (a second data pocket) for a recurrence. A data pocket longer than
    the skipped range (episode + ``skip_margin``) also looks like a recurrence: no window helps there."""
    recurrences_to_cut: int = 2
    """Recurrences in a row at the same place before the LR is cut (each one is a rollback). Two, not
    one: a single recurrence on one other batch can be chance when the spike is marginal -- on the
    demo model an end-of-warm-up blip came back once on other data and then passed on the third
    batch with no LR change, and cutting 10x there (from step 0, for the rest of the run) cost
    +18..+30 % held-out loss -- while a spike that comes back at the same place on two different data
    ranges is not the data. The price: with ``max_rollbacks=3`` the cut comes with the last
    rollback, so a cut that is not enough halts. 1 = cut at the first recurrence."""
    recurrence_lr_factor: float = 0.1
    """Multiply the scheduled LR by this when a recurrence is found (again on every further
    recurrence: the cuts compound). One order of magnitude: the evidence says the LR is above the
    stability limit by an unknown margin; a cut too small costs another rollback (one of
    ``max_rollbacks``) and the same spike, a cut too large only slows training, which is
    recoverable. 1.0 disables the recurrence rule (every rollback is then treated as bad data)."""
    recurrence_lr_steps: int | None = None
    """Steps the recurrence cut lasts; None = the rest of the run. The default holds it, as the
    OPT-175B team did when restarting from a checkpoint with a lower LR: the cause (an LR too high
    for the weights) does not go away by itself, and restoring the LR would recreate it."""
    reset_loss_scale_on_rollback: bool = True
    """Reset the fp16 GradScaler fully after a rollback (scale and growth tracker)."""
    min_loss_scale: float = 1.0
    """A GradScaler scale below this is a collapse: reset it (if the optimizer state is finite)."""
    max_overflow_streak: int = 30
    """This many overflow steps in a row is a collapse too."""
    loss_scale_reset_to: float | None = None
    """Scale to reset to; None = the scaler's initial scale."""
    checkpoint_every: int | None = 100
    """Save a checkpoint (through the store) every this many steps; None = the user saves."""
    replay: bool = True
    """Re-run a flagged step's forward (when ``step(replay=...)`` is given) to tell a transient
    fault from bad data."""
    replay_rtol: float = 1e-4
    """A replayed loss within this relative distance of the original reproduces it."""
    defer_host_read: bool | None = None
    """Read each step's record on the host one step late (no wait on the device). None = on CUDA."""
    log_metrics: bool = True
    """Write each step's loss / grad norm / lr / loss scale to the JSONL log too."""
    halt_raises: bool = True
    """After a halt, ``batches()`` raises :class:`TrainingHalted` instead of just stopping."""

    def __post_init__(self) -> None:
        p = []
        if self.stats not in ("auto", "device", "host"):
            p.append(f"stats must be 'auto', 'device' or 'host', got {self.stats!r}")
        if self.gate not in GATES:
            p.append(f"gate must be one of {GATES}, got {self.gate!r}")
        for name in ("episode_gap", "rollback_after", "max_overflow_streak", "lr_cut_steps", "recurrences_to_cut"):
            if getattr(self, name) < 1:
                p.append(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("rollback_distance", "skip_margin", "max_rollbacks", "lr_cut_from"):
            if getattr(self, name) < 0:
                p.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 < self.lr_cut_factor <= 1:
            p.append(f"lr_cut_factor must be in (0, 1], got {self.lr_cut_factor}")
        if self.recurrence_window is not None and self.recurrence_window < 0:
            p.append(f"recurrence_window must be >= 0 or None, got {self.recurrence_window}")
        if not 0 < self.recurrence_lr_factor <= 1:
            p.append(f"recurrence_lr_factor must be in (0, 1], got {self.recurrence_lr_factor}")
        if self.recurrence_lr_steps is not None and self.recurrence_lr_steps < 1:
            p.append(f"recurrence_lr_steps must be >= 1 or None, got {self.recurrence_lr_steps}")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            p.append(f"max_grad_norm must be > 0 or None, got {self.max_grad_norm}")
        if not self.min_loss_scale >= 0:
            p.append(f"min_loss_scale must be >= 0, got {self.min_loss_scale}")
        if self.loss_scale_reset_to is not None and not self.loss_scale_reset_to > 0:
            p.append(f"loss_scale_reset_to must be > 0 or None, got {self.loss_scale_reset_to}")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            p.append(f"checkpoint_every must be >= 1 or None, got {self.checkpoint_every}")
        if not self.replay_rtol >= 0:
            p.append(f"replay_rtol must be >= 0, got {self.replay_rtol}")
        if not isinstance(self.loss, OutlierConfig):
            p.append(f"loss must be an OutlierConfig, got {type(self.loss).__name__}")
        if self.grad_norm is not None and not isinstance(self.grad_norm, OutlierConfig):
            p.append(f"grad_norm must be an OutlierConfig or None, got {type(self.grad_norm).__name__}")
        raise_all(p, fix="correct the GuardConfig field(s) named above")
