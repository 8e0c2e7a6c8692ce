"""GuardConfig to and from plain data: a TOML file (``lossguard simulate --config guard.toml``) or
the JSON-safe dict a framework callback stores in its checkpoint.

TOML layout -- top-level keys are :class:`GuardConfig` / :class:`PolicyConfig` fields, and the three
nested configs are tables::

    episode_gap = 20
    rollback_after = 3
    max_rollbacks = 3
    recurrence_lr_steps = "none"     # an optional field set to None: the string "none"

    [recipe]                          # RecoveryRecipe
    rollback_distance = 100
    skip_margin = 200

    [loss]                            # OutlierConfig of the loss test
    z_threshold = 7.0

    [grad_norm]                       # OutlierConfig of the grad-norm test; `grad_norm = false` disables it
    z_threshold = 7.0

An unknown key or a bad value raises :class:`LossguardError` naming the key and the file.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from ..detect.outlier import OutlierConfig
from ..errors import LossguardError
from ..recovery.recipe import RecoveryRecipe
from .judge.evidence import EvidenceConfig
from .config import GuardConfig

_NESTED = {"recipe": RecoveryRecipe, "loss": OutlierConfig, "grad_norm": OutlierConfig,
           "evidence": EvidenceConfig}


def config_to_dict(cfg: GuardConfig) -> dict[str, Any]:
    """JSON-safe dict of every field (nested configs as dicts, a disabled grad-norm test as None)."""
    return dataclasses.asdict(cfg)


def config_from_dict(data: dict[str, Any], *, source: str | os.PathLike | None = None) -> GuardConfig:
    """Build a :class:`GuardConfig` from plain data (see the module docstring for the layout).

    Args:
        data: the fields; missing ones keep their defaults.
        source: the file the data came from (named in errors).

    Raises:
        LossguardError: an unknown key, or a value of the wrong type or out of range.
    """
    if not isinstance(data, dict):
        raise LossguardError("a guard configuration must be a table of fields", path=source)
    known = {f.name for f in dataclasses.fields(GuardConfig)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            raise LossguardError(f"unknown guard setting {key!r}", path=source, where=key,
                                 fix=f"use one of: {', '.join(sorted(known))}")
        if key in _NESTED:
            if key == "grad_norm" and (value is None or value is False or value == "none"):
                kwargs[key] = None
                continue
            if isinstance(value, _NESTED[key]):
                kwargs[key] = value
                continue
            kwargs[key] = _nested(key, value, source)
        else:
            kwargs[key] = None if value == "none" else value
    try:
        return GuardConfig(**kwargs)
    except LossguardError as exc:
        raise LossguardError(f"bad guard setting: {exc.what if hasattr(exc, 'what') else exc}", path=source,
                             fix="correct the value(s) named above") from None
    except TypeError as exc:
        raise LossguardError(f"bad guard setting: a value has the wrong type ({exc})", path=source,
                             fix="numbers for counts and factors, true/false for switches") from None


def _nested(table: str, value: Any, source) -> Any:
    cls = _NESTED[table]
    if not isinstance(value, dict):
        raise LossguardError(f"{table} must be a table of {cls.__name__} fields, got {value!r}", path=source,
                             where=table)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in value:
        if key not in known:
            raise LossguardError(f"unknown guard setting {table}.{key!r}", path=source, where=f"{table}.{key}",
                                 fix=f"use one of: {', '.join(sorted(known))}")
    try:
        return cls(**{k: None if v == "none" else v for k, v in value.items()})  # "none": an optional field off
    except LossguardError as exc:
        raise LossguardError(f"bad guard setting in [{table}]: {exc}", path=source,
                             fix="correct the value(s) named above") from None
    except TypeError as exc:
        raise LossguardError(f"bad guard setting in [{table}]: wrong type ({exc})", path=source) from None


def load_config(path: str | os.PathLike) -> GuardConfig:
    """Read a guard configuration from a TOML file.

    Raises:
        LossguardError: unreadable file, invalid TOML, unknown key or bad value.
    """
    import tomllib

    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LossguardError(f"cannot read the guard configuration ({exc.strerror})", path=p,
                             fix="check the --config path") from None
    except UnicodeDecodeError:
        raise LossguardError("not a text file (the guard configuration is TOML)", path=p,
                             fix="point --config at a .toml file of GuardConfig fields (docs/guard.md)") from None
    except tomllib.TOMLDecodeError as exc:
        raise LossguardError(f"not valid TOML ({exc})", path=p, fix="fix the TOML syntax") from None
    return config_from_dict(data, source=p)
