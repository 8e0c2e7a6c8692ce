"""Checks on the files a verb writes (``--html``, ``--png``), made before any log is read.

Nothing a user owns is ever overwritten: an output path that is one of the input logs, or an
existing file that is not a previous lossguard report, is refused with a message naming it.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError

_HTML_MARK = b'<meta name="generator" content="lossguard">'
"""The tag :mod:`lossguard.report.html` writes into every report's head."""
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_previous_report(path: Path, flag: str) -> bool:
    """True when ``path`` holds what this flag writes: a lossguard HTML report, or a PNG image."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    if flag == "--png":
        return head.startswith(_PNG_MAGIC)
    return _HTML_MARK in head


def check_outputs(outputs: dict[str, str | None], inputs: list[str]) -> None:
    """Refuse outputs that would overwrite an input log or a file lossguard did not write.

    Args:
        outputs: flag (``"--html"``, ``"--png"``) -> the path given, or None when not given.
        inputs: the log paths given on the command line (``"-"`` is stdin).

    Raises:
        ConfigError: naming the flag, the path and what it would overwrite.
    """
    sources = [Path(p).resolve() for p in inputs if p != "-"]
    for flag, value in outputs.items():
        if not value:
            continue
        out = Path(value).resolve()
        folder = out.parent
        if not folder.is_dir():
            raise ConfigError(f"the folder of {flag} {value!r} does not exist", path=str(folder),
                              fix="create the folder first or write the report elsewhere")
        if out.is_dir():
            raise ConfigError(f"{flag} {value!r} is a directory",
                              fix=f"give a file name, e.g. {flag} report.{flag[2:]}")
        if out in sources:
            raise ConfigError(f"{flag} {value!r} is the input log; writing the report would destroy it",
                              path=value, fix=f"give another file name, e.g. {flag} report.{flag[2:]}")
        if out.exists() and not _is_previous_report(out, flag):
            what = "a lossguard HTML report" if flag == "--html" else "a PNG image"
            raise ConfigError(f"{flag} {value!r} exists and is not {what}; lossguard does not overwrite it",
                              path=value, fix="give a new file name, or remove the file yourself first")
