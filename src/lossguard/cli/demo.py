"""``lossguard demo``: train a tiny GPT into a real instability, unguarded and guarded, and report both.

Needs torch (``pip install 'lossguard[torch]'``). Progress goes to stderr (a rich progress bar on a
terminal, plain lines otherwise); the summary in words (or ``--json``) to stdout.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``demo`` verb."""
    from ..demo.scenarios import SCENARIOS

    choices = [n for n in SCENARIOS if not n.startswith("clean")]
    p = subparsers.add_parser(
        "demo", help="train a tiny GPT into a real loss spike, with and without the guard (CPU, about 1 min)",
        description="Train a tiny byte-level GPT on text shipped with lossguard, three times with the same seed: "
                    "clean data (the reference), a real instability unguarded, and the same instability under "
                    "the StabilityGuard. Prints what happened and writes the logs and HTML reports.")
    p.add_argument("--out", metavar="DIR", default="lossguard-demo",
                   help="output directory (default ./lossguard-demo); a non-empty directory is refused unless it "
                        "is a previous demo's output, which is replaced")
    p.add_argument("--scenario", default="bad_pocket", choices=choices, metavar="NAME",
                   help="the instability: " + "; ".join(f"{n} ({SCENARIOS[n].description})" for n in choices)
                        + "; default bad_pocket")
    p.add_argument("--steps", type=int, default=None, metavar="N",
                   help="steps per run (default the scenario's); a pocket beyond N moves to N/2")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="model seed (default 0)")
    p.add_argument("--lr", type=float, default=None, metavar="LR",
                   help="peak learning rate (default the scenario's); higher = a harder run")
    p.add_argument("--no-clean", action="store_true",
                   help="skip the clean reference run (faster; no 'within Z%% of clean')")
    p.add_argument("--watch-grad-norm", action="store_true",
                   help="let the guard judge the gradient norm too (the guard's default; off in the demo)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-html", action="store_true", help="do not write the HTML reports")
    p.add_argument("--no-progress", action="store_true", help="no progress output on stderr")
    p.set_defaults(handler=run)


class _Progress:
    """A rich progress bar per run on a terminal; otherwise a plain line every 10% of a run."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self.total, self.name, self.next_pct = enabled, 0, "", 0
        self.rich: Progress | None = None
        self.task: TaskID | None = None
        if enabled and sys.stderr.isatty():
            try:
                from rich.console import Console
                from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

                self.rich = Progress(TextColumn("{task.description:>10s}"), BarColumn(),
                                     TextColumn("step {task.completed:>4.0f}/{task.total:.0f}  {task.fields[loss]}"),
                                     TimeElapsedColumn(), console=Console(stderr=True), transient=False)
                self.rich.start()
            except ImportError:  # rich is optional: fall back to plain lines
                self.rich = None

    def phase(self, name: str, steps: int) -> None:
        if not self.enabled:
            return
        if name == "report":
            self._plain("analysing the logs and writing the reports ...")
            return
        self.name, self.total, self.next_pct = name, steps, 10
        if self.rich is not None:
            self.task = self.rich.add_task(name, total=steps, loss="")
        else:
            self._plain(f"{name}: training {steps} steps ...")

    def step(self, name: str, step: int, loss: float) -> None:
        if not self.enabled:
            return
        if self.rich is not None:
            if self.task is not None:  # phase() added it
                self.rich.update(self.task, completed=step + 1, loss=f"loss {loss:.3f}")
            return
        pct = 100 * (step + 1) // max(self.total, 1)
        if pct >= self.next_pct:
            self._plain(f"{name}: step {step + 1}/{self.total}  loss {loss:.3f}")
            self.next_pct = pct - pct % 10 + 10

    def _plain(self, text: str) -> None:
        if self.rich is not None:
            self.rich.console.print(text)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.rich is not None:
            self.rich.stop()


def run(args: argparse.Namespace) -> int:
    """Handler of ``lossguard demo``; returns the exit code."""
    from ..errors import require

    require("torch", "demo", "lossguard demo")
    import torch

    from ..demo.run import DemoConfig, describe, run_demo, summary_dict

    cfg = DemoConfig(out=args.out, scenario=args.scenario, steps=args.steps, seed=args.seed, lr=args.lr,
                     clean_reference=not args.no_clean, html=not args.no_html,
                     watch_grad_norm=args.watch_grad_norm)
    torch.set_num_threads(1)  # tiny model: one thread is fastest, and leaves a core to the user
    progress = _Progress(not args.no_progress)
    try:
        res = run_demo(cfg, on_step=progress.step, on_phase=progress.phase)
    finally:
        progress.close()
    if args.json:
        print(json.dumps(summary_dict(res), indent=2))
        return 0
    for line in describe(res):
        print(line)
    print(f"\nLogs and reports in {res.out}/ ({res.wall_time:.0f} s).")
    if not args.no_html:
        print(f"Open {res.out / 'index.html'} in a browser; or run: lossguard analyze {res.out / 'guarded.jsonl'}")
    return 0
