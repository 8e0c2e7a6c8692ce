"""The guard: sees a bad step before the optimizer applies it and recovers the run on its own.

Needs torch (``pip install 'lossguard[torch]'``); :mod:`lossguard` itself does not import this.
"""
from ..errors import require

require("torch", "torch", "lossguard.guard")

from .config import GuardConfig
from .decision import Action, Decision, StepRecord
from .gate import SkipStepAdamW
from .guard import StabilityGuard, TrainingHalted
from .policy import RecoveryPolicy

__all__ = ["Action", "Decision", "GuardConfig", "RecoveryPolicy", "SkipStepAdamW", "StabilityGuard",
           "StepRecord", "TrainingHalted"]
