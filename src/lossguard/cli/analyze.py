"""``lossguard analyze PATH...``: name every incident of a run and suggest a recovery.

Reads the files as one run (stitched), prints a terminal summary (incidents, evidence, plan and a
small plot of the curve) or, with ``--json``, the versioned document described in
``docs/analysis-json.md``. ``--fail-on KIND[,KIND]`` makes the exit code 1 when an incident of one
of those kinds is found (``any`` for every kind, ``critical``/``warning`` for a severity or worse),
so CI scripts and schedulers can act on it. ``--html``/``--png`` also write the visual report.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys

from ..classify.incident import IncidentKind
from ..errors import LossguardError, MissingDependencyError
from ..recovery.severity import SEVERITIES, Severity  # SEVERITIES re-exported for `lossguard watch`
from .inputs import add_reader_options, read_inputs
from .outputs import check_outputs


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``analyze`` verb."""
    kinds = ", ".join(k.value for k in IncidentKind)
    p = subparsers.add_parser(
        "analyze", help="find and classify loss spikes, divergence, resume artefacts, NaN; suggest a recovery",
        description="Analyse a training run (files or run directories, read as one run): name every incident, "
                    "show the evidence and suggest a recovery plan.",
        epilog=f"incident kinds: {kinds}. Exit codes: 0 ok, 1 an incident matched --fail-on, 2 bad input.")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="log files or run directories (one run); '-' reads a log or paste from standard input")
    p.add_argument("--json", action="store_true", help="print the analysis as JSON (schema: docs/analysis-json.md)")
    p.add_argument("--fail-on", default=None, metavar="KIND[,KIND]",
                   help="exit 1 when an incident of these kinds is found; 'any', or a severity "
                        "('warning', 'critical') meaning that severity or worse")
    p.add_argument("--checkpoints", default=None, metavar="DIR|STEPS",
                   help="checkpoint directory (sub-dirs like checkpoint-1200, iter_0001200, step_1200) or a comma "
                        "list of steps; plans then roll back to a checkpoint that exists")
    p.add_argument("--metric", default=None, metavar="NAME", help="the loss to analyse (default: loss)")
    add_reader_options(p)
    p.add_argument("--html", default=None, metavar="FILE", help="also write the interactive HTML report")
    p.add_argument("--png", default=None, metavar="FILE", help="also write a PNG image of the report")
    p.set_defaults(handler=run)


def parse_fail_on(text: str | None) -> tuple[set[IncidentKind], Severity | None]:
    """Kinds and minimum severity that make the command fail; raises a clear error for unknown names.

    Several severities mean the least of them (``warning,critical`` fails on a warning)."""
    if not text:
        return set(), None
    kinds: set[IncidentKind] = set()
    severity = None
    bad = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part == "any":
            kinds.update(IncidentKind)
        elif part in SEVERITIES:
            severity = Severity(part) if severity is None else min(severity, Severity(part))
        else:
            try:
                kinds.add(IncidentKind(part))
            except ValueError:
                bad.append(part)
    if bad:
        raise LossguardError(f"--fail-on: unknown kind(s) {', '.join(repr(b) for b in bad)}",
                             fix=f"use 'any', a severity ({', '.join(SEVERITIES)}) or kinds: "
                                 f"{', '.join(k.value for k in IncidentKind)}")
    return kinds, severity


def print_read_warnings(log) -> None:
    """Say on stderr what the readers warned about (a half-written last line, ...): the terminal
    summary and ``--json`` do not carry them, and stdout must stay clean for ``--json``."""
    for w in log.metadata.get("warnings", []):
        print(f"lossguard: warning: {w}", file=sys.stderr)


def _writer(module: str, func: str, what: str):
    try:
        mod = importlib.import_module(f"lossguard.report.{module}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("lossguard"):
            raise LossguardError(f"{what} reports are not available in this install (no lossguard.report.{module})",
                                 fix="upgrade lossguard, or drop the option") from None
        raise MissingDependencyError(exc.name or "?", "report", f"writing the {what} report") from None
    fn = getattr(mod, func, None)
    if fn is None:
        raise LossguardError(f"lossguard.report.{module} has no {func}()", fix="upgrade lossguard")
    return fn


def run(args: argparse.Namespace) -> int:
    """Handler of ``lossguard analyze``."""
    from ..analysis import analyze
    from ..classify.settings import AnalyzeConfig
    from ..plan import parse_checkpoints

    kinds, severity = parse_fail_on(args.fail_on)
    check_outputs({"--html": args.html, "--png": args.png}, args.paths)
    checkpoints = parse_checkpoints(args.checkpoints) if args.checkpoints else None
    writers = []
    if args.html:
        writers.append((_writer("html", "write_html", "HTML"), args.html))
    if args.png:
        writers.append((_writer("png", "write_png", "PNG"), args.png))
    log = read_inputs(args)
    analysis = analyze(log, checkpoints=checkpoints, settings=AnalyzeConfig(metric=args.metric))
    print_read_warnings(log)  # after analyze(): bad input gets one message, the error alone
    if args.json:
        print(json.dumps(analysis.to_dict(), indent=2, allow_nan=False))
    else:
        from ..report.text import print_text
        print_text(analysis, sys.stdout)
    for write, path in writers:
        written = write(analysis, path)
        print(f"lossguard: wrote {written or path}", file=sys.stderr)
    hit = [i for i in analysis.incidents
           if i.kind in kinds or (severity is not None and Severity(i.severity) >= severity)]
    if hit:
        print(f"lossguard: {len(hit)} incident(s) matched --fail-on {args.fail_on}", file=sys.stderr)
        return 1
    return 0
