"""One rule for turning lossguard's records into strict JSON.

Python's ``json`` writes ``NaN`` and ``Infinity`` by default, which strict readers (JavaScript's
``JSON.parse``, most log shippers) reject. Every record lossguard writes -- the analysis JSON, the
guard's event log, the run ledger, ``simulate`` and ``watch`` output -- goes through
:func:`strict_json` first, so a non-finite value is always ``null``.
"""
from __future__ import annotations

import enum
import math
from typing import Any


def strict_json(obj: Any) -> Any:
    """``obj`` with non-finite floats as None, tuples as lists, enums as their values and numpy
    scalars as Python numbers, recursively through dicts and lists (keys become strings)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return strict_json(obj.value)
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):  # numpy scalars
        return strict_json(obj.item())
    return obj
