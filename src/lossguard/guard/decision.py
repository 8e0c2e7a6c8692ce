"""Compatibility names: the guard's decisions are defined once in :mod:`lossguard.recovery`.

``StepRecord`` is the old name of :class:`lossguard.recovery.Verdict`.
"""
from ..recovery.action import Action
from ..recovery.decision import Decision
from ..recovery.verdict import Verdict

StepRecord = Verdict

__all__ = ["Action", "Decision", "StepRecord", "Verdict"]
