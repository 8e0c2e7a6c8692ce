"""Values printed over several lines or as arrays: glued back into one line, arrays read as means.

Two shapes people paste break the one-line-one-record rule:

* a pretty-printed dict or a numpy array wrapped by its printer (``pprint`` of a JAX/Flax metrics
  dict, one key per line; ``loss [9.21 9.20 nan\\n 9.19 9.22]``): a line that leaves a ``[`` or
  ``{`` open is glued to the indented lines after it until the brackets balance
  (:class:`Joiner`);
* a loss printed as a vector (``loss [9.21 9.20 nan 9.21]``, ``loss: array([2.3, 2.4])``): the
  bracket of bare numbers is replaced by their mean, which is non-finite when any element is
  (:func:`vector_means`), so a NaN in one element is still reported; numpy's ``...`` in a
  summarised print is skipped (the mean of the elements shown).
"""
from __future__ import annotations

import re

import numpy as np

MAX_JOINED_LINES = 64
"""Lines glued into one record at most (a bracket never closed does not swallow the log)."""
MAX_JOINED_CHARS = 8192
"""Characters of one glued record at most."""

_NUM = r"(?:[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|-?(?:nan|inf|infinity))"
_VECTOR = re.compile(r"(?:(?P<call>(?:np\.|jnp\.)?array\()\s*)?\[\s*(?P<items>" + _NUM
                     + r"(?:\s*[,\s]\s*(?:\.\.\.,?\s*)?" + _NUM + r")+)\s*,?\s*\]"
                     r"(?(call)(?:\s*,\s*dtype=\w+)?\s*\))", re.I)
_ITEM = re.compile(_NUM, re.I)
_CONTINUES = re.compile(r"^(?:\s|['\"\]}),]|" + _NUM + r")", re.I)


_OPEN_TAIL = re.compile(r"[\[{][-+\w.'\":,\s()=]*$")
"""What may follow the bracket left open: numbers, names, quotes, ``:``, ``,``, ``=`` and reprs' parentheses
(a dict entry, array elements), not a progress bar's ``[00:12<00:15, 36.5it/s`` cut short."""


def opens(text: str) -> bool:
    """True when ``text`` leaves a ``[`` or ``{`` open on an array's elements or a dict's entries."""
    return unbalanced(text) and _OPEN_TAIL.search(text) is not None


def unbalanced(text: str) -> bool:
    """True when ``text`` leaves a ``[`` or ``{`` open."""
    return text.count("[") > text.count("]") or text.count("{") > text.count("}")


def vector_means(text: str) -> tuple[str, int]:
    """``text`` with each bracket of two or more bare numbers replaced by their mean (``nan`` when
    any element is non-finite), and how many were replaced."""
    if "[" not in text:
        return text, 0
    count = 0

    def mean(m: re.Match) -> str:
        nonlocal count
        count += 1
        values = np.array([float(x) for x in _ITEM.findall(m.group("items"))])
        return repr(float(values.mean())) if np.all(np.isfinite(values)) else "nan"

    return _VECTOR.sub(mean, text), count


class Joiner:
    """Glues a line that leaves a bracket open to the continuation lines after it.

    :meth:`push` takes each ``(line number, text)`` and returns the records ready to be read (none
    while a record is open, the glued record when it closes, or the open record and the new line
    when the new line is no continuation); :meth:`flush` returns what is still open at the end.
    """

    def __init__(self) -> None:
        self._open: tuple[int, list[str]] | None = None

    @property
    def pending(self) -> bool:
        """True while a record is open."""
        return self._open is not None

    def push(self, number: int, text: str) -> list[tuple[int, str]]:
        """The records ready after reading one line."""
        if self._open is None:
            if ("[" in text or "{" in text) and opens(text):
                self._open = (number, [text.rstrip()])
                return []
            return [(number, text)]
        first, parts = self._open
        if not _CONTINUES.match(text):
            self._open = None
            return [(first, parts[0]), *[(first, p) for p in parts[1:]], *self.push(number, text)]
        parts.append(text.strip())
        glued = " ".join(parts)
        if not unbalanced(glued) or len(parts) >= MAX_JOINED_LINES or len(glued) > MAX_JOINED_CHARS:
            self._open = None
            return [(first, glued)]
        return []

    def flush(self) -> list[tuple[int, str]]:
        """The lines of a record still open (read as they are)."""
        if self._open is None:
            return []
        first, parts = self._open
        self._open = None
        return [(first, p) for p in parts]
