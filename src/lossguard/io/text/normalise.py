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
_PADDED = re.compile(r"(?i)(?<![\w.])(nan|inf)x+(?!\w)")
"""A non-finite value padded by a fill character: PaddleOCR formats its metrics ``'{:x<6f}'``, so a NaN
prints ``nanxxx`` (a finite value has 6 decimals already and gets no fill)."""


_THOUSANDS = re.compile(r"(?i)(?<![\w/])((?:global[ _])?(?:step|steps|iter|iters|iteration|epoch|batch|it)\s*[:=#]?\s*)"
                        r"(\d{1,3}(?:,\d{3})+)(?![\d.]|,\d)")
"""A counter written with thousands separators (``iter:   1,000``): read whole. Only counters: the
fast path reads other values by the line's own number split (``tps: 3,000`` stays ``3``), and a
counter read as ``1`` would number the run wrongly."""
_BAR_END = re.compile(r"\d+/\d+\s*\[[^\[\]]*?(?:it/s|s/it),[^\[\]]*?[:=][^\[\]]*\](?=\s*\S)")
"""The end of a tqdm bar with a postfix of values (``447/493 [01:03<00:06,  7.08it/s, Batch Loss: 27.93]``)
and text glued after it. A bare bar glued before a record (``| 3/100 [00:01<?, ?it/s]train loss: 2.3``)
stays on the record's line: its counter is that record's."""


def split_glued(text: str) -> list[str]:
    """A tqdm bar and what a ``print`` glued after it (tqdm redraws with ``\r`` and no newline, so the
    next message lands on the bar's line: ``...7.08it/s, Batch Loss: 27.93][Warning] Skip this batch!
    (Loss: 101.48)``) as two lines; any other text as itself."""
    m = _BAR_END.search(text)
    if m is None:
        return [text]
    return [text[:m.end()], *split_glued(text[m.end():])]


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
    if "xx" in line:
        line = _PADDED.sub(r"\1", line)
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
    if "," in line:  # after the prefixes: a clock's "10:00:00,000" is no number with separators
        line = _THOUSANDS.sub(lambda m: m.group(1) + m.group(2).replace(",", ""), line)
    return line, rank
