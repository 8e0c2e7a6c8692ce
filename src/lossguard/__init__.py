"""lossguard keeps large-model training runs alive.

The public API is the names in ``__all__``, importable from the top level::

    from lossguard import read_log, analyze                                 # the log path: numpy only
    from lossguard import StabilityGuard, CheckpointStore, ResumableSampler  # the live side: torch

Log analysis (``read_log``, ``stitch``, ``analyze``, ``simulate``) needs only numpy and is imported
with the package. The live side (guard, checkpoints, resumable data) is imported on first use
through the module ``__getattr__``, so ``import lossguard`` never imports torch; a name that needs
torch raises :class:`~lossguard.errors.MissingDependencyError` naming the extra to install
(``pip install 'lossguard[torch]'``) when it is used without it.

``tests/test_public_api.py`` freezes ``__all__`` and the CLI's verbs and flags: changing either is
a deliberate act (regenerate the snapshot with ``LOSSGUARD_UPDATE_API=1 pytest tests/test_public_api.py``).
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .analysis import Analysis, analyze
from .classify.incident import Incident, IncidentKind
from .errors import LossguardError
from .io import read_log
from .runlog import RunLog, Segment, Series
# ``stitch`` and ``simulate`` share their names with their modules: imported eagerly, so a later
# first import of the submodule cannot rebind the package attribute to the module.
from .simulate import Simulation, simulate
from .stitch import stitch
from .version import __version__

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time these come from __getattr__
    from .checkpoint import CheckpointStore, HostSnapshot, ShardedCheckpointStore, ShardedTrainState, TrainState
    from .data import ResumableLoader, ResumableSampler
    from .guard import Action, Decision, GuardConfig, SkipStepAdamW, StabilityGuard, TrainingHalted

# name -> the subpackage that defines it; imported on first attribute access (see __getattr__).
# Each subpackage decides itself which of its names need torch (``lossguard.guard`` raises the
# MissingDependencyError for StabilityGuard, TrainingHalted and SkipStepAdamW without it).
_LAZY: dict[str, str] = {
    "Action": "lossguard.guard",
    "Decision": "lossguard.guard",
    "GuardConfig": "lossguard.guard",
    "SkipStepAdamW": "lossguard.guard",
    "StabilityGuard": "lossguard.guard",
    "TrainingHalted": "lossguard.guard",
    "CheckpointStore": "lossguard.checkpoint",
    "HostSnapshot": "lossguard.checkpoint",
    "ShardedCheckpointStore": "lossguard.checkpoint",
    "ShardedTrainState": "lossguard.checkpoint",
    "TrainState": "lossguard.checkpoint",
    "ResumableLoader": "lossguard.data",
    "ResumableSampler": "lossguard.data",
}

# A literal list (linters and type checkers read it); tests/test_public_api.py checks it holds _LAZY.
__all__ = [
    "Action", "Analysis", "CheckpointStore", "Decision", "GuardConfig", "HostSnapshot", "Incident", "IncidentKind",
    "LossguardError", "ResumableLoader", "ResumableSampler", "RunLog", "Segment", "Series", "ShardedCheckpointStore",
    "ShardedTrainState", "Simulation", "SkipStepAdamW", "StabilityGuard", "TrainState", "TrainingHalted",
    "__version__", "analyze", "read_log", "simulate", "stitch",
]


def __getattr__(name: str) -> Any:
    """Import a live-side name from its subpackage on first use (PEP 562), then cache it here."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's attributes plus the lazy names, so ``dir(lossguard)`` and completion show them."""
    return sorted(set(globals()) | set(__all__))
