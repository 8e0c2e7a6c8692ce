"""What one zoo run is: the family, the training recipe, the scenario, and what came out of it.

A :class:`RunSpec` fixes everything a run depends on (model family, seed, batch size, optimizer,
LR schedule, steps, scenario, guarded or not), so a run is a pure function of its spec and two runs
of one spec are the same computation. An :class:`Outcome` is what the zoo records of it: the final
held-out loss and every intervention the guard made.
"""
from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass, field

from lossguard.errors import raise_all


class Optim(str, enum.Enum):
    """The optimizer of a run."""

    ADAMW = "adamw"
    """``torch.optim.AdamW``, weight decay 0.01 on matrices."""
    SGD = "sgd"
    """``torch.optim.SGD`` with momentum 0.9 (Nesterov off), weight decay 0 ."""


class Schedule(str, enum.Enum):
    """The LR schedule of a run, always a ``LambdaLR`` (so a rollback restores it exactly)."""

    WARMUP_COSINE = "warmup_cosine"
    """Linear warm-up over 10% of the steps, then cosine decay to 10% of the peak."""
    WARMUP_CONSTANT = "warmup_constant"
    """Linear warm-up over 10% of the steps, then constant (the issue's "warm-up LambdaLR")."""


class Scenario(str, enum.Enum):
    """What goes wrong in the run (see :mod:`evals.zoo.scenarios`)."""

    HEALTHY = "healthy"
    """Nothing: clean data, the scheduled LR."""
    BAD_POCKET = "bad_pocket"
    """20 garbage batches at 60% of the run (data positions: a data skip removes them)."""
    LR_JUMP = "lr_jump"
    """The scheduled LR multiplied 10x/20x/30x from mid-run on: an optimizer fault."""
    EARLY_NAN = "early_nan"
    """One parameter's gradient is NaN at one of steps 0-5, once."""
    EARLY_HUGE = "early_huge"
    """Every gradient multiplied by 1e6 at one of steps 0-5, once."""


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """One zoo run, completely determined by these fields."""

    family: str
    """Model family name (a key of :data:`evals.zoo.FAMILIES`)."""
    seed: int = 0
    """Model-initialisation and data-order seed (the teacher and its data do not change)."""
    batch_size: int = 32
    """Samples (classifiers) or sequences (language models) per batch."""
    optimizer: Optim = Optim.ADAMW
    """The optimizer."""
    schedule: Schedule = Schedule.WARMUP_COSINE
    """The LR schedule."""
    steps: int = 400
    """Optimizer steps of the run (skipped steps count, as in the guard's accounting)."""
    scenario: Scenario = Scenario.HEALTHY
    """What goes wrong."""
    guarded: bool = False
    """Run under the StabilityGuard (the README's loop, default ``GuardConfig``)."""
    oracle: bool = False
    """The control of a bad-pocket run: unguarded, and the pocket's batches are dropped exactly (no
    step trains on them), the best any data skip can do. Its gap to the clean run is the floor of
    the "within 2% of clean" figure: a different data order alone moves these small runs."""

    def __post_init__(self) -> None:
        p = []
        if not isinstance(self.seed, int) or self.seed < 0:
            p.append(f"seed must be an int >= 0, got {self.seed!r}")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            p.append(f"batch_size must be an int >= 1, got {self.batch_size!r}")
        if not isinstance(self.steps, int) or not 20 <= self.steps <= 600:
            p.append(f"steps must be an int in [20, 600] (zoo runs are kept cheap), got {self.steps!r}")
        if not isinstance(self.optimizer, Optim):
            p.append(f"optimizer must be an Optim, got {self.optimizer!r}")
        if not isinstance(self.schedule, Schedule):
            p.append(f"schedule must be a Schedule, got {self.schedule!r}")
        if not isinstance(self.scenario, Scenario):
            p.append(f"scenario must be a Scenario, got {self.scenario!r}")
        if self.oracle and (self.guarded or self.scenario is not Scenario.BAD_POCKET):
            p.append("oracle is the unguarded control of a bad-pocket run: it needs scenario=BAD_POCKET, guarded=False")
        raise_all(p, fix="correct the RunSpec field(s) named above")

    @property
    def key(self) -> str:
        """Short readable name of the run (family/bs/optimizer/schedule/seed/scenario/guarded)."""
        return (f"{self.family}/b{self.batch_size}/{self.optimizer.value}/{self.schedule.value}/s{self.seed}/"
                f"{self.scenario.value}/{'oracle' if self.oracle else 'guarded' if self.guarded else 'unguarded'}")

    def with_(self, **changes) -> "RunSpec":
        """A copy with ``changes`` applied."""
        return RunSpec(**{**self.__dict__, **changes})


@dataclass(kw_only=True)
class Outcome:
    """What one zoo run did."""

    spec: RunSpec
    """The run."""
    final_val: float = math.inf
    """Held-out loss at the end (eval mode); ``inf`` if the weights became non-finite."""
    steps: int = 0
    """Steps of the live timeline at the end (``spec.steps`` unless halted)."""
    computed_steps: int = 0
    """Forward/backward passes, including those a rollback threw away."""
    skips: int = 0
    """Steps whose update the guard withheld."""
    rollbacks: int = 0
    """Rollbacks."""
    lr_cuts: int = 0
    """LR cuts (any reason)."""
    halted: bool = False
    """The guard halted the run."""
    fault_steps: list = field(default_factory=list)
    """Steps at which the scenario's early gradient fault was injected."""
    fault_skipped: bool | None = None
    """Early-fault scenarios: the guard withheld the faulty step (None elsewhere)."""
    reasons: list = field(default_factory=list)
    """``(step, event, reasons)`` of every guard decision other than a metric record, in order."""
    restarts: int = 0
    """Relaunches of an HF run through the restart path (exit code 75 -> resume from the ledger's checkpoint)."""
    wall_time: float = 0.0
    """Seconds for the run, evaluation included."""
    series: dict = field(default_factory=dict)
    """``{"loss": [...], "grad_norm": [...]}`` per step when the run was asked to record them."""

    @property
    def interventions(self) -> int:
        """Rollbacks + LR cuts + halts: what a healthy run must never get."""
        return self.rollbacks + self.lr_cuts + int(self.halted)

    def to_dict(self) -> dict:
        """JSON-ready record (enums as their values, ``inf`` as None)."""
        d = asdict(self)
        d["spec"] = {k: (v.value if isinstance(v, enum.Enum) else v) for k, v in self.spec.__dict__.items()}
        d["final_val"] = self.final_val if math.isfinite(self.final_val) else None
        d["interventions"] = self.interventions
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Outcome":
        """Inverse of :meth:`to_dict`."""
        s = dict(d["spec"])
        spec = RunSpec(**{**s, "optimizer": Optim(s["optimizer"]), "schedule": Schedule(s["schedule"]),
                          "scenario": Scenario(s["scenario"])})
        kw = {k: v for k, v in d.items() if k not in ("spec", "interventions")}
        kw["final_val"] = math.inf if kw.get("final_val") is None else kw["final_val"]
        return cls(spec=spec, **kw)
