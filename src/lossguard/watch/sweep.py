"""Sweeps: a directory of many runs, one :class:`~.session.RunWatch` each, one line per run.

``lossguard watch sweeps/lr-search/`` where every sub-directory is a run (a hyper-parameter sweep,
a cluster's job directory) follows them all and prints one line per run whenever its state changes
(waiting, running, alert, incident, stalled), and a table at the end. A directory is a sweep when
it holds no log of its own and at least two sub-directories that hold files, none of them named
like a checkpoint (``checkpoint-500``, ``iter_0001000``, ``global_step500``: those are one run's
checkpoints, as HF and Megatron lay them out, not runs). Runs that appear later are picked up.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..checkpoint.names import looks_like_checkpoint
from ..io import HEAD_BYTES, detect_format
from ..io import runs as run_files
from .engine import WatchConfig
from .events import EventKind, WatchEvent
from .session import RunWatch
from .text import GrammarKeys

def _holds_files(d: Path) -> bool:
    return any(f.is_file() for f in d.rglob("*") if not f.name.startswith("."))


def _has_own_log(d: Path) -> bool:
    for f in d.iterdir():
        if not f.is_file() or f.name.startswith(".") or run_files.is_side_file(f):
            continue
        if "tfevents" in f.name:
            return True
        try:
            with open(f, "rb") as fh:
                if detect_format(f, fh.read(HEAD_BYTES)) is not None:
                    return True
        except OSError:
            continue
    return False


def run_dirs(path: str) -> list[str]:
    """The runs of a sweep directory, or [] when ``path`` is one run (a file, or a run directory)."""
    d = Path(path)
    if not d.is_dir() or _has_own_log(d):
        return []
    subs = sorted(s for s in d.iterdir() if s.is_dir() and not s.name.startswith("."))
    if any(looks_like_checkpoint(s.name) for s in subs):
        return []
    runs = [str(s) for s in subs if _holds_files(s)]
    return runs if len(runs) >= 2 else []


class Sweep:
    """Follows every run of a sweep directory.

    Args:
        path: the sweep directory.
        config: engine settings for every run.
        format: force a reader.
        keys: ``--step-key`` / ``--loss-key`` for every run's text logs.
    """

    def __init__(self, path: str, config: WatchConfig | None = None, *, format: str | None = None,
                 keys: GrammarKeys | None = None) -> None:
        self.path = path
        self.config = config
        self.format = format
        self.keys = keys
        self.runs: dict[str, RunWatch] = {}
        self._shown: dict[str, tuple] = {}
        self._discover()

    def _discover(self) -> None:
        d = Path(self.path)
        for s in sorted(x for x in d.iterdir() if x.is_dir() and not x.name.startswith(".")):
            name = str(s)
            if name not in self.runs and _holds_files(s):
                self.runs[name] = RunWatch(os.path.relpath(name, self.path), [name], self.config, format=self.format,
                                           keys=self.keys)

    def step(self) -> tuple[list[WatchEvent], list[WatchEvent]]:
        """Poll every run; returns (state lines that changed, the runs' own events for hooks)."""
        self._discover()
        own: list[WatchEvent] = []
        for run in self.runs.values():
            own += run.step()
        return self.changed(), own

    def changed(self) -> list[WatchEvent]:
        """A state line for every run whose state or incidents changed since its last line."""
        out = []
        for run in self.runs.values():
            s = run.summary()
            key = (s["state"], s["incidents"], tuple(s["kinds"]))
            if self._shown.get(run.name) != key:
                self._shown[run.name] = key
                out.append(state_event(run))
        return out


def state_event(run: RunWatch) -> WatchEvent:
    """One run's line: state, step, loss, incidents."""
    s = run.summary()
    loss = f"{s['last_loss']:.4g}" if s["last_loss"] is not None else "-"
    newest = run.engine.incidents()[-1] if run.engine.incidents() else None
    found = (f"{s['incidents']} incident(s), worst {s['worst_severity']}; "
             f"newest {newest.kind.value} at step {newest.onset}"
             if newest is not None else "no incident")
    msg = f"{s['state']:8} step {s['last_step'] if s['last_step'] is not None else '-':>8}  loss {loss:>8}  {found}"
    return WatchEvent(EventKind.RUN_STATE, run.name, s["last_step"], msg, data=s)
