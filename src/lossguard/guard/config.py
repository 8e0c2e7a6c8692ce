"""GuardConfig: the judge's tests, the executor's settings, and (inherited) the recovery policy.

The policy part -- budgets, escalation rules and the :class:`RecoveryRecipe` -- is
:class:`lossguard.recovery.PolicyConfig`, which this class extends: a guard and ``lossguard simulate``
built from one GuardConfig run the same policy. Torch-free (``lossguard simulate`` builds one).

The defaults follow the PaLM / WeLM recipe scaled to a run checkpointed every 100 steps: skip a
bad step, roll back to a checkpoint >= 100 steps before an episode that does not settle, skip the
episode's batches plus 200 more, and stop when one incident (an episode and its recurrences) has
used three rollbacks. What counts as a bad step is the calibrated rule of ``evidence``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..detect.outlier import OutlierConfig
from ..detect.updates_stopped import STALL_STEPS
from ..errors import raise_all
from ..recovery.config import PolicyConfig
from .judge.evidence import EvidenceConfig

GATES = ("auto", "host", "device")
STATS = ("auto", "device", "host")


@dataclass(kw_only=True)
class GuardConfig(PolicyConfig):
    """Settings of :class:`lossguard.guard.StabilityGuard` (policy fields: see :class:`PolicyConfig`)."""

    loss: OutlierConfig = field(default_factory=OutlierConfig)
    """Robust outlier test on the (global) training loss; the analyser's test, same defaults."""
    grad_norm: OutlierConfig | None = field(default_factory=OutlierConfig)
    """Outlier test on the global gradient norm (before clipping); None watches only the loss (and
    non-finite gradients). Its verdict alone does not withhold a step: see ``evidence``."""
    evidence: EvidenceConfig = field(default_factory=EvidenceConfig)
    """What counts as evidence of trouble (:mod:`lossguard.guard.judge.evidence`): a grad-norm outlier
    together with the loss, a grad norm far beyond its own recent tail, and the first steps'
    sanity bound. Healthy heavy-tailed grad norms of small batches cost a run nothing."""
    gate: str = "auto"
    """How a bad update is withheld. ``"device"``: the optimizer takes the verdict as a tensor and
    selects with ``torch.where`` (needs :class:`SkipStepAdamW` or any optimizer whose ``step``
    accepts ``gate=``; no host sync). ``"host"``: read the verdict once per step (one scalar
    transfer) and do not call ``optimizer.step()``. ``"auto"``: device when the optimizer supports it."""
    stats: str = "auto"
    """Where the outlier statistics run. ``"device"``: :class:`DeviceOutlier` tensors on the model's
    device (no host sync; the choice for GPUs). ``"host"``: the analyser's own
    :class:`OnlineOutlier` on floats read back each step. ``"auto"``: host on CPU, else device.
    Both give the same verdicts as ``score()``, bit for bit."""
    shadow: bool = False
    """Report only: log what the guard would do, never withhold a step or roll back."""
    max_grad_norm: float | None = None
    """Clip the global gradient norm to this value (the guard measures the norm anyway)."""
    checkpoint_every: int | None = 100
    """Save a checkpoint (through the store) every this many steps; None = the user saves."""
    replay: bool = True
    """Re-run a flagged step's forward (when ``step(replay=...)`` is given) to tell a transient
    fault from bad data."""
    replay_rtol: float = 1e-4
    """A replayed loss within this relative distance of the original reproduces it."""
    defer_host_read: bool | None = None
    """Read each step's verdict on the host one step late (no wait on the device). None = on CUDA."""
    log_metrics: bool = True
    """Write each step's loss / grad norm / lr / loss scale to the JSONL log too."""
    halt_raises: bool = True
    """After a halt, ``batches()`` raises :class:`TrainingHalted` instead of just stopping."""
    max_withheld_streak: int | None = STALL_STEPS
    """Halt, with a diagnosis, once this many consecutive steps had their update withheld (None:
    never). 100 (:data:`lossguard.detect.updates_stopped.STALL_STEPS`, the analyser's threshold for a
    stretch without updates): above the longest legitimate run of skipped steps -- an fp16 loss
    scale halving from 2**32 to 1 skips at most 32 steps (64 with Megatron's hysteresis 2) -- and
    far below what a stalled run costs (issue 23: runs that skipped every step for days)."""
    loss_scale_reset_to: float | None = None
    """Scale a loss-scale reset sets; None = the scaler's initial scale."""

    def problems(self) -> list[str]:
        """Every invalid field (policy fields included), one sentence each."""
        p = super().problems()
        if self.stats not in STATS:
            p.append(f"stats must be one of {STATS}, got {self.stats!r}")
        if self.gate not in GATES:
            p.append(f"gate must be one of {GATES}, got {self.gate!r}")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            p.append(f"max_grad_norm must be > 0 or None, got {self.max_grad_norm}")
        if self.loss_scale_reset_to is not None and not self.loss_scale_reset_to > 0:
            p.append(f"loss_scale_reset_to must be > 0 or None, got {self.loss_scale_reset_to}")
        every = self.checkpoint_every
        if every is not None and (not isinstance(every, int) or every < 1):
            p.append(f"checkpoint_every must be an integer >= 1 or None, got {self.checkpoint_every!r}")
        if self.max_withheld_streak is not None and (not isinstance(self.max_withheld_streak, int)
                                                     or isinstance(self.max_withheld_streak, bool)
                                                     or self.max_withheld_streak < 1):
            p.append(f"max_withheld_streak must be an integer >= 1 or None, got {self.max_withheld_streak!r}")
        if not self.replay_rtol >= 0:
            p.append(f"replay_rtol must be >= 0, got {self.replay_rtol}")
        if not isinstance(self.evidence, EvidenceConfig):
            p.append(f"evidence must be an EvidenceConfig, got {type(self.evidence).__name__}")
        if not isinstance(self.loss, OutlierConfig):
            p.append(f"loss must be an OutlierConfig, got {type(self.loss).__name__}")
        if self.grad_norm is not None and not isinstance(self.grad_norm, OutlierConfig):
            p.append(f"grad_norm must be an OutlierConfig or None, got {type(self.grad_norm).__name__}")
        return p

    def __post_init__(self) -> None:
        raise_all(self.problems(), fix="correct the GuardConfig field(s) named above")
