"""``lossguard report PATH... --html FILE [--png FILE] [--title T]``: write the run's report as files.

Reads the logs (one run), analyses them with :func:`lossguard.analysis.analyze` and writes a
self-contained HTML report (:func:`lossguard.report.html.write_html`) and/or a static PNG
(:func:`lossguard.report.png.write_png`). Prints the report's headline and the files written.
"""
from __future__ import annotations

import argparse
import time

from ..errors import ConfigError, LossguardError
from .analyze import print_read_warnings
from .inputs import add_reader_options, read_inputs
from .outputs import check_outputs


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``report`` verb."""
    p = subparsers.add_parser(
        "report", help="write an HTML (interactive, offline) and/or PNG report of a run",
        description="Read training logs (files or run directories, read as one run), find what happened, and "
                    "write a self-contained HTML report that opens with no network, and/or a PNG picture.")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="log files or run directories (one run); '-' reads a log or paste from standard input")
    p.add_argument("--html", metavar="FILE", default=None, help="write the interactive HTML report here")
    p.add_argument("--png", metavar="FILE", default=None, help="write a static PNG picture here")
    p.add_argument("--title", metavar="T", default=None, help="report title (default: the first file's name)")
    add_reader_options(p)
    p.set_defaults(handler=run)


def _check_outputs(args: argparse.Namespace) -> None:
    """Fail before reading a large log if the outputs cannot be written."""
    if not args.html and not args.png:
        raise ConfigError("nothing to write: give --html FILE and/or --png FILE",
                          fix="for example: lossguard report run/ --html report.html")
    check_outputs({"--html": args.html, "--png": args.png}, args.paths)


def run(args: argparse.Namespace) -> int:
    """Handler of ``lossguard report``; returns the exit code."""
    _check_outputs(args)
    from .. import analysis as _analysis

    analyze = getattr(_analysis, "analyze", None)
    if analyze is None:  # only in a partial build; say so instead of a traceback
        raise LossguardError("this lossguard build has no analyser (lossguard.analysis.analyze)",
                             fix="reinstall lossguard: pip install --force-reinstall 'lossguard[report]'")
    t0 = time.perf_counter()
    log = read_inputs(args)
    analysis = analyze(log)
    print_read_warnings(log)  # after analyze(): bad input gets one message, the error alone
    written = []
    if args.html:
        from ..report.html import write_html

        written.append(write_html(analysis, args.html, title=args.title))
    if args.png:
        from ..report.png import write_png

        written.append(write_png(analysis, args.png, title=args.title))
    from ..report.words import headline

    print(headline(analysis))
    for path in written:
        print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0
