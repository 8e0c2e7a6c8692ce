"""Recovery plans: what the OPT, PaLM and WeLM teams did by hand, suggested for each incident.

(Contract only; the planning logic is added beside this dataclass.)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RecoveryPlan:
    """A suggested recovery for one incident, with its reasons.

    Attributes:
        incident: index of the incident in :attr:`lossguard.analysis.Analysis.incidents`.
        action: ``"none"``, ``"watch"``, ``"skip_batches"``, ``"rollback"`` or ``"stop"``.
        rollback_to_step: checkpoint step to restore (None when no rollback is advised).
        checkpoint_exists: True when ``rollback_to_step`` is a checkpoint known to exist
            (``--checkpoints`` was given), False when it is only the step to look for.
        skip_batches: ``(first, last)`` inclusive range of batch indices (= optimizer steps) to skip
            after restoring, or None.
        lr_factor: multiply the LR by this after restoring (1.0 = unchanged).
        reset_loss_scale: reset the fp16 loss scale (and its growth tracker) after restoring.
        reasons: the reasons, in words, one sentence each.
    """

    incident: int
    action: str
    rollback_to_step: int | None = None
    checkpoint_exists: bool = False
    skip_batches: tuple[int, int] | None = None
    lr_factor: float = 1.0
    reset_loss_scale: bool = False
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        d = asdict(self)
        d["skip_batches"] = list(self.skip_batches) if self.skip_batches else None
        return d
