"""lossguard keeps large-model training runs alive.

Log analysis (``read_log``, ``stitch``, ``analyze``) needs only numpy; the guard and the techniques
need torch, imported where used.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .analysis import Analysis, analyze
from .classify.incident import Incident, IncidentKind
from .errors import LossguardError
from .io import read_log
from .runlog import RunLog, Segment, Series
from .stitch import stitch

__all__ = ["Analysis", "Incident", "IncidentKind", "LossguardError", "RunLog", "Segment", "Series",
           "analyze", "read_log", "stitch", "__version__"]
