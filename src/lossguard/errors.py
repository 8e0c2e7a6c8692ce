"""Every error a user can cause, with the place, the value and the fix in its message.

The CLI catches :class:`LossguardError` and prints its message with exit code 2; anything else
escaping is a bug in lossguard, not in the user's input.
"""
from __future__ import annotations

import os
from typing import Iterable


class LossguardError(Exception):
    """Base of all user-facing errors.

    Args:
        what: what was wrong, with the offending value where there is one.
        path: the file or directory it was found in.
        where: the place inside it: ``"line 12"``, ``"record 40"``, ``"field 'lr'"``.
        fix: one sentence that tells the user how to fix it.
    """

    def __init__(self, what: str, *, path: str | os.PathLike | None = None,
                 where: str | None = None, fix: str | None = None) -> None:
        self.what = what
        self.path = None if path is None else os.fspath(path)
        self.where = where
        self.fix = fix
        super().__init__(self._format())

    def _format(self) -> str:
        place = ", ".join(p for p in (self.path, self.where) if p)
        text = f"{place}: {self.what}" if place else self.what
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text


class LogFormatError(LossguardError):
    """A log file whose content cannot be read as the format it claims (or was sniffed) to be."""


class UnknownFormatError(LossguardError):
    """No reader recognises the file."""


class ConfigError(LossguardError):
    """A configuration value out of range; raised by ``__post_init__`` checks, naming the field."""


class MissingDependencyError(LossguardError):
    """An optional dependency is missing; the message names the extra that installs it."""

    def __init__(self, module: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the Python package '{module}', which is not installed",
            fix=f"pip install 'lossguard[{extra}]'",
        )


class CheckpointError(LossguardError):
    """A checkpoint that is missing, incomplete or does not match the run it is loaded into."""


def raise_all(problems: Iterable[str], *, error: type[LossguardError] = ConfigError,
              path: str | None = None, fix: str | None = None) -> None:
    """Raise one error listing every problem found, or return if there is none.

    Validators collect all problems first so that a user fixes a config in one pass, not one
    error at a time.
    """
    problems = list(problems)
    if problems:
        what = problems[0] if len(problems) == 1 else "\n  - " + "\n  - ".join(problems)
        raise error(what, path=path, fix=fix)


def require(module: str, extra: str, purpose: str):
    """Import an optional dependency or raise :class:`MissingDependencyError` naming the extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise MissingDependencyError(module, extra, purpose) from exc
