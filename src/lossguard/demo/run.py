"""``lossguard demo``: the same tiny GPT trained into a real instability, unguarded and guarded.

Three runs of one scenario with the same seed (:mod:`lossguard.demo.scenarios`): a clean-data
reference (the same model and schedule without the instability: what "recovered" means), the
unguarded run, and the run under :class:`lossguard.guard.StabilityGuard` with a
:class:`CheckpointStore` and a :class:`ResumableSampler`. Each writes a JSONL log; each log is read
back with :func:`lossguard.io.read_log` and analysed with :func:`lossguard.analysis.analyze`, so the
summary's "spike at step S" is what ``lossguard analyze`` says about that file. The HTML report of
each run (the guard's actions drawn on the guarded curve) and an ``index.html`` linking them are
written beside the logs.

Output directory (``--out``): ``clean.jsonl``, ``unguarded.jsonl``, ``guarded.jsonl`` (+
``guarded.halt.txt`` if the guard halted), ``ckpt/``, ``*.html``, ``summary.json`` and the marker
``.lossguard-demo``. A directory that holds other files is refused: the demo only ever replaces
its own previous output.
"""
from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import ConfigError, raise_all
from .scenario import Scenario
from .scenarios import SCENARIOS
from .summary import RUNS, _index_html, describe, summary_dict
from .train import TrainResult, demo_guard_config, train

__all__ = ["DemoConfig", "DemoResult", "MARKER", "OUTPUTS", "RUNS", "describe", "prepare_out", "run_demo",
           "summary_dict"]

MARKER = ".lossguard-demo"
"""File that marks a directory as demo output (the only kind the demo may overwrite)."""
OUTPUTS = ("clean.jsonl", "unguarded.jsonl", "guarded.jsonl", "guarded.halt.txt", "clean.html",
           "unguarded.html", "guarded.html", "index.html", "summary.json", "ckpt", MARKER)
"""Everything the demo writes into its directory."""


@dataclass(kw_only=True)
class DemoConfig:
    """What ``lossguard demo`` runs."""

    out: str | Path = "lossguard-demo"
    """Output directory (created; refused if it holds anything but a previous demo's output)."""
    scenario: str = "bad_pocket"
    """A name of :data:`lossguard.demo.scenarios.SCENARIOS` other than the clean ones."""
    steps: int | None = None
    """Override the scenario's step count (a pocket or LR jump beyond it is moved to 1/2 of it)."""
    seed: int = 0
    """Model seed (the data order is the scenario's)."""
    lr: float | None = None
    """Override the scenario's peak learning rate (a harder run: higher)."""
    clean_reference: bool = True
    """Also train the clean-data reference run (needed for "within Z% of clean")."""
    html: bool = True
    """Write the HTML reports."""
    watch_grad_norm: bool = False
    """Let the guard judge the gradient norm too (its default). Off in the demo: in this tiny model
    the grad norm spikes at the end of warm-up are a property of the weights -- withholding the
    update leaves the weights, and so the spike, where they were -- so the guard would skip, roll
    back and halt over a spike the unguarded run simply trains through."""

    def __post_init__(self) -> None:
        problems = []
        if self.scenario not in SCENARIOS or self.scenario.startswith("clean"):
            choices = ", ".join(n for n in SCENARIOS if not n.startswith("clean"))
            problems.append(f"field 'scenario' must be one of {choices}, got {self.scenario!r}")
        if self.steps is not None and not (isinstance(self.steps, int) and self.steps >= 20):
            problems.append(f"field 'steps' must be an integer >= 20, got {self.steps!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            problems.append(f"field 'seed' must be an integer >= 0, got {self.seed!r}")
        if self.lr is not None and not (isinstance(self.lr, (int, float)) and 0 < self.lr < 10):
            problems.append(f"field 'lr' must be in (0, 10), got {self.lr!r}")
        raise_all(problems, fix="run `lossguard demo --help` for the options")

    def scenario_obj(self) -> Scenario:
        """The scenario with this config's overrides applied."""
        sc = SCENARIOS[self.scenario].with_(seed=self.seed)
        if self.lr is not None:
            sc = sc.with_(lr=float(self.lr))
        if self.steps is not None and self.steps != sc.steps:
            n = self.steps
            changes: dict = {"steps": n, "warmup": min(sc.warmup, max(1, n // 10)),
                             "eval_every": max(1, min(sc.eval_every, n // 5))}
            p = sc.pocket
            if p is not None and p.start + p.length >= n:
                from .scenario import Pocket
                changes["pocket"] = Pocket(start=n // 2, length=max(1, min(p.length, n // 10)), kind=p.kind)
            if sc.lr_jumps:
                changes["lr_jumps"] = tuple((at if at < n else n // 2, f) for at, f in sc.lr_jumps)
            sc = sc.with_(**changes)
        return sc

    def clean_obj(self) -> Scenario:
        """The clean reference: the scenario without its pocket / LR jumps, at the clean LR."""
        sc = self.scenario_obj()
        clean = SCENARIOS["clean"]
        # When the scenario's instability is its LR (high_lr), the reference trains at the clean LR;
        # otherwise at the run's own LR (so --lr changes both runs alike).
        lr_is_the_instability = SCENARIOS[self.scenario].lr != clean.lr
        return sc.with_(name="clean", pocket=None, lr_jumps=(), lr=clean.lr if lr_is_the_instability else sc.lr,
                        description="the same model on clean data")


@dataclass
class DemoResult:
    """The three runs and the files written."""

    scenario: Scenario
    clean: TrainResult | None
    unguarded: TrainResult
    guarded: TrainResult
    out: Path
    headlines: dict = field(default_factory=dict)
    """``{run: the analyser's one-line headline of its log}``."""
    files: list = field(default_factory=list)
    """Paths written (logs, reports, summary)."""
    wall_time: float = 0.0

    def vs_clean(self, r: TrainResult) -> float | None:
        """Relative held-out gap to the clean run (0.01 = 1% worse), or None."""
        if self.clean is None or not math.isfinite(self.clean.final_val) or not math.isfinite(r.final_val):
            return None
        return r.final_val / self.clean.final_val - 1.0


def prepare_out(out: str | Path) -> Path:
    """Create ``out`` or clear a previous demo's output from it; refuse anything else."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r} is a file", path=str(out), fix="give a directory")
    if out.is_dir():
        entries = list(out.iterdir())
        if entries and not (out / MARKER).is_file():
            raise ConfigError(f"--out {str(out)!r} is not empty and is not a previous `lossguard demo` output "
                              f"({len(entries)} entries, no {MARKER} marker)", path=str(out),
                              fix="choose a new or empty directory with --out DIR")
        foreign = [e.name for e in entries if e.name not in OUTPUTS]
        if foreign:
            raise ConfigError(f"--out {str(out)!r} holds files the demo did not write: "
                              f"{', '.join(sorted(foreign)[:5])}", path=str(out),
                              fix="move them away or choose another --out DIR")
        for e in entries:
            shutil.rmtree(e) if e.is_dir() else e.unlink()
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by `lossguard demo`; the demo may replace this directory's contents\n",
                              encoding="utf-8")
    return out


def run_demo(cfg: DemoConfig, *, on_step: Callable[[str, int, float], None] | None = None,
             on_phase: Callable[[str, int], None] | None = None) -> DemoResult:
    """Train the runs, write logs, reports and ``summary.json``.

    Args:
        cfg: what to run.
        on_step: ``fn(run, step, loss)`` after every computed step.
        on_phase: ``fn(run, steps)`` when a run starts (``run`` in :data:`RUNS`, or ``"report"``).
    """
    t0 = time.perf_counter()
    out = prepare_out(cfg.out)
    sc = cfg.scenario_obj()
    results: dict[str, TrainResult] = {}
    plan = [("clean", cfg.clean_obj(), False)] if cfg.clean_reference else []
    plan += [("unguarded", sc, False), ("guarded", sc, True)]
    gcfg = demo_guard_config(sc, **({} if cfg.watch_grad_norm else {"grad_norm": None}))
    for name, s, guarded in plan:
        if on_phase is not None:
            on_phase(name, s.steps)
        cb = (lambda step, loss, _n=name: on_step(_n, step, loss)) if on_step is not None else None
        results[name] = train(s, guarded=guarded, log_path=out / f"{name}.jsonl", ckpt_dir=out / "ckpt",
                              guard_config=gcfg if guarded else None, on_step=cb)
    res = DemoResult(scenario=sc, clean=results.get("clean"), unguarded=results["unguarded"],
                     guarded=results["guarded"], out=out)
    if on_phase is not None:
        on_phase("report", 0)
    _analyse_and_report(res, cfg)
    res.wall_time = time.perf_counter() - t0
    summary = out / "summary.json"
    res.files.append(str(summary))
    summary.write_text(json.dumps(summary_dict(res), indent=2) + "\n", encoding="utf-8")
    return res


def _analyse_and_report(res: DemoResult, cfg: DemoConfig) -> None:
    from ..analysis import analyze
    from ..io import read_log
    from ..report.words import headline

    pages = []
    for name in RUNS:
        r = getattr(res, name)
        if r is None:
            continue
        res.files.append(r.log_path)
        analysis = analyze(read_log(r.log_path))
        res.headlines[name] = headline(analysis)
        if cfg.html:
            from ..report.html import write_html
            page = res.out / f"{name}.html"
            write_html(analysis, page, title=f"lossguard demo: {name} run ({res.scenario.name}, seed {r.seed})")
            res.files.append(str(page))
            pages.append((name, page.name))
    if cfg.html:
        index = res.out / "index.html"
        index.write_text(_index_html(res, pages), encoding="utf-8")
        res.files.insert(0, str(index))
