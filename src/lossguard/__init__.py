"""lossguard keeps large-model training runs alive.

Log analysis (``read_log``, ``stitch``, ``analyze``) needs only numpy; the guard and the techniques
need torch, imported where used.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import LossguardError
from .runlog import RunLog, Segment, Series
from .stitch import stitch

__all__ = ["LossguardError", "RunLog", "Segment", "Series", "stitch", "__version__"]
