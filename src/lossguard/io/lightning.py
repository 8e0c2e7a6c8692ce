"""Lightning ``metrics.csv``, as written by ``lightning.pytorch.loggers.CSVLogger``.

Layout: ``<save_dir>/<name>/version_N/metrics.csv``; every launch (``Trainer.fit``, including a
resume from a checkpoint) writes a new ``version_N``, so each file is one segment and the directory
of versions is read as one run by :func:`lossguard.io.read_log`. The header is the sorted union of
the logged keys (``epoch``, ``step``, ``train_loss_step``, ``val_loss``, ...) and every row sets only
the metrics logged at that moment: a train row and a validation row share a step, and both carry the
same ``epoch``, which is kept once.
"""
from __future__ import annotations

import re
from pathlib import Path

from .tabular import to_runlog
from .csv import _first_line, delimiter_of, read_table

NAME = "lightning"
_VERSION = re.compile(r"^version_(\d+)$")


def sniff(path: Path, head: bytes) -> bool:
    """True for a CSVLogger header: comma-separated, sorted (the writer sorts the keys), with ``epoch`` and ``step``."""
    header = _first_line(head)
    if not header or delimiter_of(header) != ",":
        return False
    names = [n.strip() for n in header.split(",")]
    return "epoch" in names and "step" in names and names == sorted(names)


def read(path: Path, *, root: Path | None = None, fast: bool = True):
    """Read one ``metrics.csv`` as one segment (its ``version_N`` directory is noted on it).

    Raises:
        LogFormatError: as for CSV: empty file, non-numeric metric, ragged rows, steps going
            backwards for one metric; the message names the line.
    """
    from ..errors import LogFormatError

    path = Path(path)
    table = read_table(path, fast=fast)
    version = _VERSION.match(path.parent.name)
    note = f"Lightning {path.parent.name}" if version else ""
    metadata = {"version": int(version.group(1))} if version else {}
    try:
        return to_runlog(table, path=path, format=NAME, segments=None, segment_notes=[note],
                         dedupe=True, metadata=metadata)
    except LogFormatError:
        if not fast:
            raise
        return read(path, root=root, fast=False)
