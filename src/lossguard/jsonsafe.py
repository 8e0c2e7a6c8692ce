"""One rule for turning lossguard's records into strict JSON.

Python's ``json`` writes ``NaN`` and ``Infinity`` by default, which strict readers (JavaScript's
``JSON.parse``, most log shippers) reject. Every record lossguard writes -- the analysis JSON, the
guard's event log, the run ledger, ``simulate`` and ``watch`` output -- goes through
:func:`strict_json` first, so a non-finite value is always ``null``.
"""
from __future__ import annotations

import enum
import json
import math
from pathlib import Path
from typing import Any

from .errors import LossguardError


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


def read_json_file(path: Path, *, what: str, fix_unreadable: str, fix_invalid: str) -> Any:
    """The JSON document in ``path`` (a file lossguard wrote: the run ledger, the skip list).

    Raises:
        LossguardError: naming ``what`` and the file, when it cannot be read (``fix_unreadable``)
            or is not valid JSON (``fix_invalid``).
    """
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise LossguardError(f"cannot read {what} ({exc.strerror})", path=path, fix=fix_unreadable) from None
    except ValueError as exc:
        raise LossguardError(f"{what} is not valid JSON ({exc})", path=path, fix=fix_invalid) from None
