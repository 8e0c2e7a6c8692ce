"""The guard: sees a bad step before the optimizer applies it and recovers the run on its own.

Needs torch (``pip install 'lossguard[torch]'``) for :class:`StabilityGuard` and
:class:`SkipStepAdamW`; :class:`GuardConfig` and the host judge are torch-free (``lossguard
simulate`` uses them), so the torch-backed names are imported on first use.
"""
from ..recovery.action import Action
from ..recovery.decision import Decision
from ..recovery.policy import RecoveryPolicy
from ..recovery.verdict import Verdict
from .config import GuardConfig

__all__ = ["Action", "Decision", "GuardConfig", "NameMethod", "RecoveryPolicy", "SampleAttribution", "SkipStepAdamW",
           "StabilityGuard", "TrainingHalted", "Verdict"]

_LAZY = {"SkipStepAdamW": ".gate", "StabilityGuard": ".guard", "TrainingHalted": ".executor"}


def __getattr__(name: str):
    if name in _LAZY:
        from ..errors import require
        require("torch", "torch", "lossguard.guard")
        import importlib
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    if name in ("SampleAttribution", "NameMethod"):  # torch-free until a batch is replayed
        from . import sample_namer
        return getattr(sample_namer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
