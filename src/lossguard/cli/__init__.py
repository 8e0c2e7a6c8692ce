"""The ``lossguard`` command. Each verb lives in its own module with ``register(subparsers)``.

Exit codes: 0 success; 1 the verb's own "found something" signal (``analyze --fail-on``); 2 bad input
or usage (a clear message, never a traceback); 130 interrupted.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import NoReturn

from ..version import __version__
from ..errors import LossguardError

# Verb modules, in the order `lossguard --help` lists them. A verb whose module is missing is
# simply not offered, so optional parts can ship later without touching this file's logic.
VERBS = ("info", "analyze", "report", "demo", "watch", "simulate", "verify_resume", "skiplist")

EXIT_OK, EXIT_FOUND, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse exits 2 on usage errors; keep its message short
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every available verb."""
    parser = _Parser(prog="lossguard", description="Keep large-model training runs alive: read logs, name "
                     "every spike and divergence, guard live runs.")
    parser.add_argument("--version", action="version", version=f"lossguard {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    sub.required = True
    for verb in VERBS:
        try:
            module = importlib.import_module(f"{__name__}.{verb}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{verb}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``lossguard`` console script; returns the exit code."""
    # The library logs its warnings (a failing hook, a halt) on per-module loggers and adds no
    # handler; the command is the application, so it configures logging: bare messages on stderr,
    # as logging's last-resort handler would show them. A no-op when logging is already configured
    # (a caller running main() in-process keeps its own set-up).
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except LossguardError as exc:
        print(f"lossguard: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("lossguard: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `lossguard info ... | head`
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
