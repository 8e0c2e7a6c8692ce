"""``lossguard info PATH...``: what was read from a run's logs, at a glance.

Prints the format, the files, one line per metric (points, step range, NaN/Inf, dead points) and
one line per segment (start / resume / rollback, how many points it superseded). ``--json`` prints
:meth:`RunLog.summary` plus the reader's metadata instead. Uses ``rich`` for the tables when it is
installed and plain aligned text otherwise.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import sys
import threading
from pathlib import Path
from typing import Any

from .inputs import add_reader_options, read_inputs

SLOW_READ_SECONDS = 1.0
"""After this long without a result, a note on stderr says the read is still going."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``info`` verb."""
    p = subparsers.add_parser("info", help="show what a training log holds: metrics, steps, segments, rollbacks",
                              description="Read training logs (files or run directories, read as one run) and "
                                          "show what they hold.")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="log files or run directories (one run); '-' reads a log or paste from standard input")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of tables")
    p.add_argument("--explain", action="store_true",
                   help="text logs: show the line templates read, their columns, the step and loss chosen and "
                        "the alternatives (override with --step-key / --loss-key)")
    add_reader_options(p)
    p.set_defaults(handler=run)


def _read_with_progress(args: argparse.Namespace):
    """:func:`read_inputs`, with a note on stderr if it takes longer than ``SLOW_READ_SECONDS``."""
    paths = args.paths

    def note() -> None:
        more = " ..." if len(paths) > 3 else ""
        print(f"lossguard: reading {', '.join(paths[:3])}{more} (large logs take a few seconds)",
              file=sys.stderr, flush=True)

    timer = threading.Timer(SLOW_READ_SECONDS, note)
    timer.daemon = True
    timer.start()
    try:
        return read_inputs(args)
    finally:
        timer.cancel()


def summary_of(log) -> dict[str, Any]:
    """The JSON document ``info --json`` prints: the RunLog summary plus metadata and events."""
    doc = log.summary()
    doc["metadata"] = log.metadata
    doc["first_events"] = log.events[:20]
    return _jsonable(doc)


def _jsonable(x: Any) -> Any:
    """Strict JSON: non-finite floats become the strings "nan"/"inf"/"-inf"; unknown objects str()."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    if hasattr(x, "item"):  # numpy scalars
        return _jsonable(x.item())
    return str(x)


def run(args: argparse.Namespace) -> int:
    """Handler of ``lossguard info``."""
    log = _read_with_progress(args)
    if args.json:
        print(json.dumps(summary_of(log), indent=2, default=str, allow_nan=False))
        return 0
    write_safely(render(log))
    if getattr(args, "explain", False):
        write_safely(explain(log))
    return 0


def explain(log) -> str:
    """What the text grammar read and chose (``info --explain``), or which reader read the log."""
    doc = log.metadata.get("text")
    if not doc:
        return (f"\nexplain: read by the '{log.format}' reader, a known format whose columns are named; "
                "--loss-key NAME picks another series as the loss\n")
    out = [f"\nexplain: {doc['lines']:,} lines, {doc['numeric_lines']:,} with labelled numbers",
           f"  step: {doc['step']} ({doc['step_rule']})"
           + (f"; other counters: {', '.join(doc['other_steps'])}" if doc["other_steps"] else ""),
           f"  loss: {doc['loss']}"
           + (f"; other losses: {', '.join(doc['other_losses'])}" if doc["other_losses"] else ""),
           "  templates (most frequent first; * = read):"]
    for t in doc["templates"]:
        out.append(f"  {'*' if t['read'] else ' '} {t['rows']:>8,}  {t['example'][:110]}")
        cols = ", ".join(c if c and not c.startswith(" ") else "(counter)" + c for c in t["columns"])
        out.append(f"              columns: {cols}")
    out.append("  override: --step-key LABEL (or 'order', 'epoch*batch', a '/N' suffix: N per step), --loss-key LABEL")
    return "\n".join(out) + "\n"


def write_safely(text: str, stream=None) -> None:
    """Write ``text`` to stdout even where it holds what the terminal cannot encode.

    Names come from the user's files: a JSON key ``"\\udc80"`` decodes to a lone surrogate, and a
    metric name in Chinese meets a ``C``-locale terminal. Such characters are written as backslash
    escapes instead of failing the whole command with a UnicodeEncodeError.
    """
    stream = sys.stdout if stream is None else stream
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        stream.write(text)
    except UnicodeEncodeError:
        stream.write(text.encode(encoding, "backslashreplace").decode(encoding, "replace"))
    stream.flush()


def _n(x: int | None) -> str:
    return "-" if x is None else f"{x:,}"


def _short_names(sources: list[str]) -> dict[str, str]:
    """Each source relative to the sources' common directory (``version_0/metrics.csv``)."""
    import os

    if len(sources) < 2:
        return {p: Path(p).name for p in sources}
    try:
        base = os.path.commonpath([str(Path(p).parent) for p in sources])
    except ValueError:
        return {p: p for p in sources}
    return {p: os.path.relpath(p, base) for p in sources}


def _rows(log) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    s = log.summary()
    short = _short_names(s["sources"])
    mhead = ["metric", "points", "steps", "first", "last", "NaN", "Inf", "dead"]
    mrows = []
    for name, m in _shown(s["metrics"]):
        if m is None:
            mrows.append([name, "", "", "", "", "", "", ""])
            continue
        _, values = log.live(name)
        first = f"{values[0]:.5g}" if len(values) else "-"
        last = f"{values[-1]:.5g}" if len(values) else "-"
        mrows.append([name, _n(m["points"]), f"{_n(m['first_step'])} - {_n(m['last_step'])}", first, last,
                      _n(m["nan"]) if m["nan"] else "", _n(m["inf"]) if m["inf"] else "",
                      _n(m["dead_points"]) if m["dead_points"] else ""])
    one_source = len(s["sources"]) == 1
    shead = ["#", "kind", "steps", "superseded", *([] if one_source else ["source"]), "note"]
    srows = []
    for g in s["segments"]:
        srows.append([str(g["index"]), g["kind"], f"{_n(g['first_step'])} - {_n(g['last_step'])}",
                      _n(g["superseded"]) if g["superseded"] else "",
                      *([] if one_source else [short.get(g["source"], g["source"])]), g["note"]])
    return mhead, mrows, shead, srows


MAX_METRIC_ROWS = 200
"""Metrics listed in the table; a log with thousands (per-layer statistics) lists the first ones and
says how many more there are (all are in ``--json``), so the table stays readable and fast."""


def _shown(metrics: dict[str, Any]):
    items = list(metrics.items())
    yield from items[:MAX_METRIC_ROWS]
    if len(items) > MAX_METRIC_ROWS:
        yield f"... {len(items) - MAX_METRIC_ROWS:,} more (see --json)", None


def headline(log) -> str:
    """One sentence: files, format, steps, segments, rollbacks, dead and non-finite points."""
    s = log.summary()
    nonfinite = sum(m["nan"] + m["inf"] for m in s["metrics"].values())
    files = len(s["sources"])
    parts = [f"{files} file{'s' if files != 1 else ''} read as {s['format']}",
             f"steps {_n(s['first_step'])} - {_n(s['last_step'])}",
             f"{len(s['segments'])} segment{'s' if len(s['segments']) != 1 else ''}"
             f" ({s['resumes']} resume{'s' if s['resumes'] != 1 else ''}, "
             f"{s['rollbacks']} rollback{'s' if s['rollbacks'] != 1 else ''})",
             f"{_n(s['dead_points'])} dead point{'s' if s['dead_points'] != 1 else ''}",
             "all values finite" if not nonfinite else f"{_n(nonfinite)} non-finite values"]
    if s["events"]:
        parts.append(f"{s['events']} events")
    return "; ".join(parts)


def render(log) -> str:
    """The human-readable report (rich tables when available, plain text otherwise)."""
    mhead, mrows, shead, srows = _rows(log)
    short = _short_names(log.sources)
    title = ", ".join(short[p] for p in log.sources[:3]) + (" ..." if len(log.sources) > 3 else "")
    skipped = log.metadata.get("skipped", [])
    extra = f"skipped {len(skipped)} file(s) that are not logs: {', '.join(Path(p).name for p in skipped[:5])}\n" \
        if skipped else ""
    ignored = log.metadata.get("ignored_columns")
    if ignored:
        extra += f"ignored text column(s): {', '.join(ignored)}\n"
    extra += "".join(f"warning: {w}\n" for w in log.metadata.get("warnings", []))
    events = "".join(f"  step {e.get('step', '?')}: {e.get('event')}\n" for e in log.events[:10])
    if events:
        events = "events:\n" + events
    try:
        from rich import box
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        return (f"{title}\n{headline(log)}\n\n{_plain(mhead, mrows)}\n{_plain(shead, srows)}\n{events}{extra}")
    console = Console(record=True, width=max(100, min(160, _term_width())), file=_Null())
    console.print(f"[bold]{title}[/bold]")
    console.print(headline(log), highlight=False)
    for head, rows, caption in ((mhead, mrows, "metrics"), (shead, srows, "segments")):
        t = Table(title=caption, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for i, h in enumerate(head):
            t.add_column(h, justify="right" if i and h not in ("kind", "source", "note", "steps") else "left",
                         no_wrap=h != "note")
        for r in rows:
            style = "red" if (caption == "segments" and r[1] == "rollback") else None
            t.add_row(*r, style=style)
        console.print(t)
    if events:
        console.print(events, end="", highlight=False)
    if extra:
        console.print(extra, end="", highlight=False)
    return console.export_text(styles=sys.stdout.isatty())


class _Null(io.StringIO):
    """A text stream that drops what it is given (the console records it instead)."""

    def write(self, _: str) -> int:
        return 0

    def flush(self) -> None:
        pass


def _term_width() -> int:
    import shutil

    return shutil.get_terminal_size((120, 24)).columns


def _plain(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines) + "\n"
