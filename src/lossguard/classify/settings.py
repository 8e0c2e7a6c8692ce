"""AnalyzeConfig: every threshold of the analysis in one validated, JSON-ready object."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from ..detect.episode import EpisodeConfig
from ..detect.loss_scale import LossScaleConfig
from ..detect.regime import RegimeConfig
from ..detect.resume import ResumeConfig
from ..detect.series import DetectorConfig
from ..detect.shift import ShiftConfig
from ..errors import raise_all


@dataclass(kw_only=True)
class AnalyzeConfig:
    """Settings of :func:`lossguard.analysis.analyze`. Budgets in steps are converted to points with
    the run's log interval (Megatron logs every 5th step), detection windows stay in points."""

    metric: str | None = None
    """The loss to analyse (default ``loss``, else the first ``loss/<stream>``)."""
    detectors: DetectorConfig = field(default_factory=DetectorConfig)
    """Per-series detectors; their episode budgets are overwritten from the step budgets below."""
    fast_steps: int = 100
    """A spike back on its pre-event level within this many optimizer steps of its peak recovered fast."""
    budget_steps: int = 2000
    """A spike not back within this many steps (at least 50 points) did not recover."""
    shift_ratio: float = 0.75
    """An unrecovered excursion that keeps this fraction of its peak excess is a level shift."""
    grad_lead_points: int = 20
    """A grad-norm spike up to this many points before a loss event belongs to that event."""
    grad_norm_rel: float = 2.0
    """A grad-norm spike must at least triple it (relative threshold 2.0): the grad norm is far
    noisier and heavier-tailed (log-normal) than the loss, and real grad-norm spikes are multiples
    (BLOOM-176B: 0.24 -> 960)."""
    stream_single_z: float = 10.0
    """A one-point spike on a single stream must be this many sigma (per-stream losses are noisier)."""
    settle_steps: int = 400
    """An unrecovered excursion's settled level is measured between this many and twice as many steps
    after onset (past the decay of a spike, short enough to extrapolate the pre-event trend)."""
    settled_rel: float = 0.08
    """A slow spike whose level after "recovery" is still this fraction above the extrapolated
    pre-event trend did not recover: it settled higher."""
    drop_span_steps: int = 128
    """A sudden drop falls several times more over this many steps than over the same span before
    (Llama-2-7B: 4 to 2.5 within ~60 steps); converted to points with the log interval."""
    drop_span_fraction: float = 0.01
    """...or over this fraction of the run's logged points, whichever is longer: "sudden" is relative
    to the run's own time scale (a fall over 1% of a million-step run is sudden; 128 steps of it are
    a slope)."""
    shift: ShiftConfig = field(default_factory=ShiftConfig)
    """Window-median step test for level shifts too small for the point test."""
    resume: ResumeConfig = field(default_factory=ResumeConfig)
    """Boundary tests (resume spike, repeated data)."""
    loss_scale: LossScaleConfig = field(default_factory=LossScaleConfig)
    """fp16 loss-scale collapse."""
    regime: RegimeConfig = field(default_factory=RegimeConfig)
    """Regime change: a lasting jump of the relative noise."""

    def __post_init__(self) -> None:
        problems = []
        if self.fast_steps < 1:
            problems.append(f"fast_steps must be >= 1, got {self.fast_steps}")
        if self.budget_steps <= self.fast_steps:
            problems.append(f"budget_steps must be > fast_steps={self.fast_steps}, got {self.budget_steps}")
        if not 0 < self.shift_ratio <= 1:
            problems.append(f"shift_ratio must be in (0, 1], got {self.shift_ratio}")
        if not self.grad_norm_rel >= 0:
            problems.append(f"grad_norm_rel must be >= 0, got {self.grad_norm_rel}")
        if not 0 <= self.drop_span_fraction < 0.25:
            problems.append(f"drop_span_fraction must be in [0, 0.25), got {self.drop_span_fraction}")
        if self.drop_span_steps < 1:
            problems.append(f"drop_span_steps must be >= 1, got {self.drop_span_steps}")
        if self.grad_lead_points < 0:
            problems.append(f"grad_lead_points must be >= 0, got {self.grad_lead_points}")
        raise_all(problems)

    def for_interval(self, interval: int, points: int = 0) -> DetectorConfig:
        """Detector settings for a run logged every ``interval`` steps (``points`` logged points in all,
        0 when unknown, as for a live run)."""
        fast = max(2, -(-self.fast_steps // interval))
        budget = max(fast + 1, 50, -(-self.budget_steps // interval))
        d = self.detectors
        spike = replace(d.spike, fast_points=fast, budget_points=budget)
        dip: EpisodeConfig = replace(d.dip, fast_points=fast, budget_points=budget)
        drop = replace(d.drop, span_points=max(d.drop.smooth_points, -(-self.drop_span_steps // interval),
                                               int(self.drop_span_fraction * points)))
        return replace(d, spike=spike, dip=dip, drop=drop)

    def to_dict(self) -> dict:
        """JSON-ready form (recorded in the analysis so a result can be reproduced)."""
        return asdict(self)
