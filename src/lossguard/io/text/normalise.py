"""One line of console output -> the text a person reads, and the rank that printed it.

Terminals and loggers add what is no part of a training log's grammar: ANSI colour codes (torchtitan
puts one *between* each label and its number), the ``\\r`` redraws of progress bars (split by
:func:`lossguard.io.text.lines.text_lines`), markdown quoting, and line prefixes: timestamps, logger
levels, absl's ``I1125 12:00:00.123 140 train.py:12]``, torchrun's ``[rank3]:`` / ``[default3]:``.
:func:`normalise` removes them; a rank prefix is returned so the reader can keep one rank's lines.
"""
from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]|\x1b\]\d*;[^\x07\x1b]*(?:\x07|\x1b\\)")
"""ANSI escape sequences: CSI (colours, cursor moves), two-byte escapes, OSC titles."""

# Prefixes a logger or launcher writes before the message, repeated as long as one matches.
_PREFIX = re.compile(
    r"^\s*(?:"
    r"\[?\d{4}([-/])\d\d\1\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?"  # ISO (or 2023/06/09) timestamp
    r"|[\w.]+\s+-\s+(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+-"  # "mmengine - INFO -": logger name, level
    r"|\[?\d\d:\d\d:\d\d(?:[.,]\d+)?\]?"  # a clock time alone
    r"|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s+[\w./-]+:\d+\]"  # absl / glog
    r"|\[?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|NOTICE)\]?(?=[\s:|\]-])"  # a level
    r"|[\w.]+\.py:\d+(?::\w+)?\]?"  # a source location
    r"|\[(?:rank|default)\s*\d+\]:?"  # torchrun --tee / Megatron rank prefix
    r")\s*[:|\-]?\s*")
_RANK = re.compile(r"^\s*\[(?:rank|default)\s*(\d+)\]:?")
_QUOTE = re.compile(r"^(?:\s*>)+\s?")
_GLUED = re.compile(r"(?i)\b(step|steps|iter|iteration|epoch|loss|batch)_(?=[-+]?(?:\d|nan\b|inf))")
"""A counter or loss name glued to its number by ``_`` (``step_78540:\tloss_-4.06``, a custom print):
the ``_`` is read as a space, as a person reads it."""


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences."""
    return ANSI.sub("", text) if "\x1b" in text else text


def normalise(line: str) -> tuple[str, int | None]:
    """The message of one line (no colours, quoting or prefixes) and the rank its prefix names.

    Only prefixes are removed, never what follows them, so ``[step=12/100]`` (a record header) stays.
    """
    if "\x1b" in line:
        line = ANSI.sub("", line)
    if ">" in line[:4]:
        line = _QUOTE.sub("", line)
    if "`" in line:
        line = line.replace("`", " ")
    if "_" in line:
        line = _GLUED.sub(r"\1 ", line)
    rank = None
    m = _RANK.match(line)
    if m is not None:
        rank = int(m.group(1))
    if line[:1].isalnum() or line[:1] in " [|":
        stripped = line
        for _ in range(6):
            m = _PREFIX.match(stripped)
            if m is None or not m.end():
                break
            stripped = stripped[m.end():]
        if stripped.strip():
            line = stripped
    return line, rank
