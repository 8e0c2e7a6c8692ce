"""Where the seconds of ``lossguard analyze`` go: its phases timed one after the other in one process.

Import, format detection, reading (for a text log also the grammar's own phases: the block scan,
choosing step and loss, building the points) and the analysis, each as wall and CPU seconds (the
CPU seconds move less with the load of a shared machine). The scan's share by function comes from
cProfile with ``--profile``.

    PYTHONPATH=src .venv/bin/python benchmarks/analyze_phases.py LOG [LOG ...] [--profile]

Time one file per process for clean figures (freeing one large log's arrays is charged to the next).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


class _Clock:
    """Wall and CPU seconds since the last mark."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        self.marks: list[str] = []

    def mark(self, name: str) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        self.marks.append(f"{name} {wall - self.wall:.2f}/{cpu - self.cpu:.2f}")
        self.wall, self.cpu = wall, cpu


def main() -> None:
    """Time the phases for each file given and print them."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument("--profile", action="store_true", help="the text scan's share by function (cProfile)")
    args = ap.parse_args()
    clock = _Clock()
    from lossguard.analysis import analyze
    from lossguard.io import detect_format, read_log

    clock.mark("import")
    print(f"import wall/cpu s: {clock.marks[0].split()[-1]}")
    for path in args.logs:
        clock.marks = []
        fmt = detect_format(path)
        clock.mark("detect")
        if fmt == "text":
            from lossguard.io.text import fast

            choose, build = sys.modules["lossguard.io.text.choose"], sys.modules["lossguard.io.text.build"]
            scan = fast.scan_file(path)
            clock.mark("scan")
            choice = choose.choose(scan.tables)
            clock.mark("choose")
            build.build(scan, choice)
            clock.mark("build")
            del scan
        log = read_log(path)
        clock.mark("read_log (whole read)")
        analyze(log)
        clock.mark("analyze")
        print(f"{path.name} [{fmt}] wall/cpu s: " + ", ".join(clock.marks) + f" | load {os.getloadavg()[0]:.1f}")
        if args.profile and fmt == "text":
            _profile(path)


def _profile(path: Path) -> None:
    """The text scan's cumulative seconds by function of the fast path."""
    import cProfile
    import pstats

    from lossguard.io.text import fast

    profile = cProfile.Profile()
    profile.enable()
    fast.scan_file(path)
    profile.disable()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    wanted = ("scan_file", "match_block", "_numbers", "_blocks", "_rows", "_mixed", "_slow", "_pick")
    for (file, _, name), (_, calls, _, cumulative, _) in sorted(stats.items(), key=lambda kv: -kv[1][3]):
        if name in wanted and "io" in file and "text" in file:
            print(f"  {name:12s} {calls:5d} calls, {cumulative:.2f} s cumulative")


if __name__ == "__main__":
    main()
