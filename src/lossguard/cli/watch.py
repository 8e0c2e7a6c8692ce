"""``lossguard watch PATH...``: follow a live run's logs and raise the alarm as things happen.

Reads only what the files gain every ``--every`` seconds, runs the online detectors on each new
point, and prints each incident once it is decided, with the evidence and plan ``analyze`` would
give (``--json``: one JSON object per line, see docs/watch.md). ``--on-incident CMD`` and
``--webhook URL`` are run for every decided incident and for a run that stopped writing.
``--until-idle SECONDS`` ends the watch once no file has grown for that long. A directory of
several runs (a sweep) gets one line per run.

Exit codes: 0 nothing matched ``--fail-on`` (also after Ctrl-C, which prints the summary), 1 an
incident matched ``--fail-on``, 2 bad input or usage.
"""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys

from ..classify.incident import IncidentKind
from ..errors import LossguardError
from ..recovery.severity import Severity
from .analyze import parse_fail_on
from .inputs import add_grammar_options


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return v


def _check_hooks(args: argparse.Namespace) -> None:
    """Hook flags checked at start, naming the flag: a typo must not wait for the first incident."""
    if args.hook_attempts < 1:
        raise LossguardError(f"--hook-attempts must be >= 1, got {args.hook_attempts}",
                             fix="pass how many times to try each hook, e.g. --hook-attempts 4")
    if args.webhook is not None and not args.webhook.startswith(("http://", "https://")):
        raise LossguardError(f"--webhook must be an http:// or https:// URL, got {args.webhook!r}",
                             fix="pass the full URL, e.g. --webhook https://hooks.slack.com/services/T000/B000/XXX")
    if args.on_incident is not None:
        try:
            words = shlex.split(args.on_incident)
        except ValueError as exc:
            raise LossguardError(f"--on-incident {args.on_incident!r} is not a valid shell command ({exc})",
                                 fix="check its quotes") from None
        if not words:
            raise LossguardError("--on-incident is empty", fix="pass a command, e.g. --on-incident 'notify-oncall'")
        # Only a plain program name is checked: a shell line ('a && b', 'X=1 cmd', a builtin) is the
        # shell's business, and its failures are reported (and retried) per event.
        prog = words[0]
        plain = not any(c in args.on_incident for c in "|&;<>()$`=") and prog not in _SHELL_WORDS
        if plain and shutil.which(prog) is None:
            raise LossguardError(f"--on-incident: command {prog!r} not found"
                                 + (" (not executable)" if os.path.exists(prog) else " on PATH"),
                                 fix="give the full path of an executable, or a command on PATH")


_SHELL_WORDS = frozenset({"cd", "exec", "eval", "set", "export", "source", ".", "if", "for", "while", "case",
                          "{", "!", "test", "[", "printf", "echo", "read", "true", "false", ":"})


def _why_nothing(follower, paths: list[str]) -> tuple[str, bool]:
    """Why a watch that went idle read no point, and whether that reason carries its own fix.

    A file whose reading broke (its error names the line and the fix), one no reader knows, an
    empty file, or nothing there at all."""
    broken = [f.broken for f in follower.files.values() if f.broken]
    if broken:
        return f"reading stopped on an error: {broken[0]}", True
    waiting = sorted(follower.waiting)
    if waiting:
        return f"no reader recognises {', '.join(waiting)}", False
    if all(os.path.isfile(p) for p in paths):
        return ("the file is empty" if len(paths) == 1 else "the files are empty"), False
    return "no log file appeared", False


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``watch`` verb."""
    kinds = ", ".join(k.value for k in IncidentKind)
    p = subparsers.add_parser(
        "watch", help="follow a live run's logs; print each incident as it is decided, run hooks",
        description="Follow growing training logs (files or run directories, read as one run; or a directory of "
                    "runs) and print each incident the moment it is decided, with the same detectors, evidence "
                    "and plan as 'analyze'.",
        epilog=f"incident kinds: {kinds}. Exit codes: 0 nothing matched --fail-on (also after Ctrl-C), "
               "1 an incident matched --fail-on, 2 bad input.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="log files or run directories (one run), or one "
                   "directory whose sub-directories are runs (a sweep)")
    p.add_argument("--every", type=_positive, default=1.0, metavar="SECONDS",
                   help="poll the files this often (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object per line (schema: docs/watch.md)")
    p.add_argument("--on-incident", default=None, metavar="CMD",
                   help="run this shell command per incident, with the incident as JSON on its stdin")
    p.add_argument("--webhook", default=None, metavar="URL",
                   help="POST each incident to this URL (Slack-compatible: {\"text\": ...} plus the incident)")
    p.add_argument("--fail-on", default=None, metavar="KIND[,KIND]",
                   help="exit 1 at the end when an incident of these kinds was found; 'any', or a severity "
                        "('warning', 'critical') meaning that severity or worse")
    p.add_argument("--hook-attempts", type=int, default=4, metavar="N",
                   help="tries per event for a failing hook, with backoff 0.5, 1, 2... s (default 4)")
    p.add_argument("--until-idle", type=_positive, default=None, metavar="SECONDS",
                   help="stop once no file has grown for this long (say so, decide what is open, exit)")
    p.add_argument("--stall-after", type=_positive, default=600.0, metavar="SECONDS",
                   help="without --until-idle: say once that the run stopped writing after this long (default 600)")
    p.add_argument("--checkpoints", default=None, metavar="DIR|STEPS",
                   help="checkpoint directory or comma list of steps; plans roll back to one that exists")
    p.add_argument("--metric", default=None, metavar="NAME", help="the loss to follow (default: loss)")
    p.add_argument("--format", default=None, metavar="NAME", help="force a reader instead of sniffing the format")
    add_grammar_options(p)
    p.add_argument("--sweep", action=argparse.BooleanOptionalAction, default=None,
                   help="treat the one directory given as a directory of runs (default: detected)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``lossguard watch``."""
    from ..classify.settings import AnalyzeConfig
    from ..io import READERS
    from ..plan import parse_checkpoints
    from ..watch.alerts import HookConfig, HookRunner, Printer
    from ..watch.engine import WatchConfig
    from ..watch.events import EventKind, WatchEvent
    from ..watch.loop import LoopConfig, follow
    from ..watch.session import RunWatch
    from ..watch.text import GrammarKeys
    from ..watch.sweep import Sweep, run_dirs

    kinds, severity = parse_fail_on(args.fail_on)
    if "-" in args.paths:
        raise LossguardError("watch follows files; it cannot read standard input ('-')",
                             fix="point watch at the file the job writes (train.log), or use "
                                 "'lossguard analyze - < train.log' for a finished paste")
    _check_hooks(args)
    if args.format is not None and args.format not in READERS:
        raise LossguardError(f"unknown format {args.format!r}", fix=f"use one of: {', '.join(READERS)}")
    checkpoints = tuple(parse_checkpoints(args.checkpoints)) if args.checkpoints else None
    config = WatchConfig(settings=AnalyzeConfig(metric=args.metric), checkpoints=checkpoints)
    hooks = HookRunner(HookConfig(command=args.on_incident, webhook=args.webhook, attempts=args.hook_attempts))
    printer = Printer(sys.stdout, as_json=args.json)
    sweep_runs = run_dirs(args.paths[0]) if len(args.paths) == 1 and args.sweep is not False else []
    if args.sweep and not sweep_runs:
        raise LossguardError("not a directory of runs (it needs two or more sub-directories with files)",
                             path=args.paths[0], fix="name one run's files or directory without --sweep")
    loop = LoopConfig(every=args.every, until_idle=args.until_idle, stall_after=args.stall_after)
    keys = GrammarKeys(step_key=args.step_key, loss_key=args.loss_key)
    source = (Sweep(args.paths[0], config, format=args.format, keys=keys) if sweep_runs
              else RunWatch(" ".join(args.paths), args.paths, config, format=args.format, keys=keys))

    def emit(events: list[WatchEvent], *, show: bool = True) -> None:
        for ev in events:
            if show:
                printer(ev)
            hooks(ev)

    runs, interrupted = follow(source, loop, emit)
    sweep = source if sweep_runs else None
    hooks.close(timeout=5.0 if interrupted else 30.0)
    incidents = [i for r in runs for i in r.engine.incidents()]
    hit = [i for i in incidents if i.kind in kinds or (
        severity is not None and Severity(i.severity) >= severity)]
    summary = {"runs": [r.summary() for r in runs], "interrupted": interrupted,
               "hooks": {"delivered": hooks.delivered, "failed": hooks.failed}, "fail_on_matched": len(hit)}
    if args.json:
        printer(WatchEvent(EventKind.SUMMARY, args.paths[0] if sweep else runs[0].name, None,
                           "watch ended", data=summary))
    else:
        why = "interrupted" if interrupted else "every run idle"
        print(f"lossguard watch: {why}; {len(runs)} run(s), {len(incidents)} incident(s)"
              + (f", hooks delivered {hooks.delivered}, failed {hooks.failed}" if hooks.active else ""), flush=True)
        for r in runs:
            s = r.summary()
            print(f"  {s['run']}: {s['state']}, {s['points']} points to step {s['last_step']}, "
                  f"{s['incidents']} incident(s)" + (f" ({', '.join(s['kinds'])})" if s["kinds"] else ""), flush=True)
    if sweep is None and not interrupted and not runs[0].engine.history.total_points:
        why, broken = _why_nothing(runs[0].follower, args.paths)
        raise LossguardError(
            f"no point was read in {args.until_idle:g} s; {why}", path=" ".join(args.paths),
            fix=None if broken else "check that this is where the job writes its log; pass --format if the file's "
                                    "format is not recognised (CSV needs a header naming a step column, JSONL one "
                                    "JSON object per line)")
    if sweep is None and not interrupted and runs[0].engine.error is not None:
        # Points were read but never analysed (e.g. --metric names no series): nothing was judged, so
        # exit 0 would tell a CI job the run is fine.
        raise runs[0].engine.error
    if hit:
        print(f"lossguard: {len(hit)} incident(s) matched --fail-on {args.fail_on}", file=sys.stderr)
        return 1
    return 0


__all__ = ["register", "run"]
