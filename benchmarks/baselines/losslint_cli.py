"""``losslint`` 0.4.1 run as its users run it: ``losslint check FILE --format json`` on a CSV.

The run is written the way a trainer appends to one CSV log (``step,loss,grad_norm,lr,...``, one row
per logged step, launches one after another, so a rollback shows as steps going backwards) and
``losslint.cli.main`` is called in-process with exactly those arguments (same code path as the
console script, without a process start per run). Its findings are mapped:

* ``nan_inf`` -> non-finite claim at the first step it lists (one claim per step, however many
  series share it);
* ``loss_spike`` -> a loss-spike claim at every step it lists (it lists at most 5; points above 10x
  the median of the 12 points on either side);
* ``divergence`` -> a divergence claim for the whole run (losslint gives no step: last-decile median
  > 1.25x first-decile median), which matches any true divergence of the run;
* ``stagnation``, ``overfit_onset``, ``step_backtrack``, ``parse``: no incident kind.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile

import numpy as np

from lossguard.classify.incident import IncidentKind as K
from lossguard.errors import require
from lossguard.runlog import RunLog

NAME = "losslint 0.4.1 (CLI, JSON)"
COVERS = frozenset({"spike", K.DIVERGENCE, K.NON_FINITE})


def write_csv(log: RunLog, path: str) -> None:
    """One CSV in launch order, as an appending trainer writes it (empty cell = not logged)."""
    names = sorted(log.series, key=lambda n: (n != "loss", n))
    rows: list[str] = []
    for g in range(len(log.segments)):
        cols = {}
        for name in names:
            s = log.series[name]
            sel = s.segment == g
            cols[name] = dict(zip(s.steps[sel].tolist(), s.values[sel].tolist()))
        steps = sorted(set().union(*[c.keys() for c in cols.values()]))
        for st in steps:
            cells = [repr(cols[n][st]) if st in cols[n] else "" for n in names]
            rows.append(",".join([str(st)] + cells))
    with open(path, "w") as fh:
        fh.write(",".join(["step"] + names) + "\n")
        fh.write("\n".join(rows).replace("nan", "nan") + "\n")


def run_cli(path: str) -> dict:
    """``losslint check PATH --format json``; returns the parsed report."""
    cli = require("losslint.cli", "bench", "The losslint baseline")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        cli.main(["check", path, "--format", "json"])
    return json.loads(buf.getvalue())


def claims(report: dict) -> list[tuple[K, int | None]]:
    """Map losslint findings to (kind, onset) claims."""
    out: set[tuple[K, int | None]] = set()
    for f in report.get("findings", []):
        d = f.get("details", {})
        if f["check"] == "nan_inf" and d.get("steps"):
            out.add((K.NON_FINITE, int(d["steps"][0])))
        elif f["check"] == "loss_spike":
            out.update((K.SPIKE_FAST, int(s)) for s in d.get("steps", []))
        elif f["check"] == "divergence":
            out.add((K.DIVERGENCE, None))
    return sorted(out, key=lambda c: (c[0].value, -1 if c[1] is None else c[1]))


def detect(log: RunLog) -> list[tuple[K, int | None]]:
    """Claims on one run."""
    fd, path = tempfile.mkstemp(suffix=".csv", prefix="losslint-")
    os.close(fd)
    try:
        write_csv(log, path)
        return claims(run_cli(path))
    finally:
        os.unlink(path)
