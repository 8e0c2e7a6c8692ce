"""Vertical key/value tables: a record printed one ``| key | value |`` row per line between rules.

Reinforcement-learning loggers (Stable-Baselines3's and OpenAI baselines' ``HumanOutputFormat``)
print each record as a box::

    ---------------------------------
    | rollout/           |          |
    |    ep_rew_mean     | -162     |
    | time/              |          |
    |    total_timesteps | 4096     |
    | train/             |          |
    |    loss            | 175      |
    ---------------------------------

Read line by line, each row is a template of its own, with no counter beside its value and no
label (the ``|`` between key and value separates them). :class:`Boxes` glues the rows between two
rules into one record line, ``rollout/ep_rew_mean: -162, time/total_timesteps: 4096, ...`` (a row
with an empty value is a tag, ``rollout/``, that prefixes the indented rows under it), which the
grammar then reads like any ``k: v`` line.
"""
from __future__ import annotations

import re

_RULE = re.compile(r"^\s*-{8,}\s*$")
_ROW = re.compile(r"^\s*\|(\s*)([^|]*?)\s*\|\s*([^|]*?)\s*\|\s*$")
MAX_ROWS = 500
"""Rows glued into one record at most (a box never has this many; memory stays bounded)."""


class Boxes:
    """Collects the rows of a box between its rules; see the module docstring."""

    def __init__(self) -> None:
        self._rows: list[str] | None = None  # None: not inside a box
        self._first = 0
        self._tag = ""

    def push(self, number: int, text: str) -> list[tuple[int, str]] | None:
        """Take one line. None: not a box line (read it as usual); else the records it completes
        (``(first line number, glued text)``), maybe none yet."""
        if _RULE.match(text):
            done = self._close()
            if not done:  # an opening rule (or a rule of nothing): rows may follow
                self._rows, self._first, self._tag = [], number, ""
            return done
        if self._rows is None:
            return None
        row = _ROW.match(text)
        if row is None or len(self._rows) >= MAX_ROWS:
            done = self._close()
            return None if not done else done + [(number, text)]
        indent, key, value = row.groups()
        if not value:
            self._tag = key if key.endswith("/") else ""
        else:
            name = self._tag + key if (indent and len(indent) > 1 and self._tag) else key
            if not indent or len(indent) <= 1:
                self._tag = ""
            self._rows.append(f"{name}: {value}")
        return []

    def flush(self) -> list[tuple[int, str]]:
        """The box still open at the end of the text, as a record (if it has rows)."""
        return self._close()

    def _close(self) -> list[tuple[int, str]]:
        rows, self._rows = self._rows, None
        return [(self._first, ", ".join(rows))] if rows else []
