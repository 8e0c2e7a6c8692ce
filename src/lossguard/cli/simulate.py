"""``lossguard simulate LOG... [--config guard.toml] [--json]``: what the guard would have done.

Replays the guard's judge and policy over a recorded run (see :mod:`lossguard.simulate`) and prints
step by step which steps it would have skipped, where it would have rolled back to and which
batches it would have skipped, when it would have cut the LR or halted. Exit 0; 2 on bad input.
"""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .analyze import print_read_warnings
from .inputs import add_reader_options, read_inputs
from .outputs import check_outputs
from ..recovery.action import Action

if TYPE_CHECKING:
    from ..simulate import Simulation


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``simulate`` verb."""
    p = subparsers.add_parser(
        "simulate", help="replay the guard over a recorded log: what would it have skipped, rolled back, cut, halted",
        description="Replay the StabilityGuard's judge and policy over a recorded run (files or run directories, "
                    "read as one run), offline, and say step by step what it would have done. Assumes batch "
                    "index == step unless the log has a batch_index series, and checkpoints every "
                    "checkpoint_every steps unless --checkpoints is given.",
        epilog="Exit codes: 0 ok, 2 bad input. The --config TOML layout is documented in docs/guard.md.")
    p.add_argument("paths", nargs="+", metavar="LOG",
                   help="log files or run directories (one run); '-' reads standard input")
    p.add_argument("--config", default=None, metavar="TOML", help="guard configuration (GuardConfig fields)")
    p.add_argument("--checkpoints", default=None, metavar="DIR|STEPS",
                   help="checkpoint directory or a comma list of steps (default: every checkpoint_every steps)")
    p.add_argument("--metric", default="loss", metavar="NAME", help="the loss series to judge (default: loss)")
    p.add_argument("--update-size", action="store_true",
                   help="also replay the opt-in update-size test (treatment=UpdateSizeTest()) over the log's "
                        "update_ratio: an LR jump the loss does not show")
    add_reader_options(p)
    p.add_argument("--json", action="store_true", help="print the simulation as JSON")
    p.add_argument("--html", default=None, metavar="FILE",
                   help="also write the HTML report of the run with the simulated actions drawn on it")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``lossguard simulate``."""
    from ..guard.config_file import load_config
    from ..plan import parse_checkpoints
    from ..simulate import simulate

    check_outputs({"--html": args.html}, args.paths)
    try:
        cfg = load_config(args.config) if args.config else None
    except UnicodeDecodeError:  # a binary file: load_config reports OSError and TOML errors, not this
        raise ConfigError("not a text file, so not a TOML guard configuration", path=args.config,
                          fix="pass a UTF-8 TOML file of GuardConfig fields (layout: docs/guard.md)") from None
    checkpoints = parse_checkpoints(args.checkpoints) if args.checkpoints else None
    log = read_inputs(args)
    # The analyser's whole-log findings are evidence for the policy too (recovery/finding.py), so
    # `simulate` names the actions `analyze` plans, at the same steps, in the same words.
    sim = simulate(log, cfg, checkpoints=checkpoints, metric=args.metric, findings=_findings(log, args.metric),
                   update_size=True if args.update_size else None)
    print_read_warnings(log)  # after simulate(): bad input gets one message, the error alone
    if args.json:
        print(json.dumps(sim.to_dict(), indent=2, allow_nan=False))
    else:
        print("\n".join(_describe(sim)))
    if args.html:
        import sys

        from ..analysis import analyze
        from ..report.html import write_html
        from ..plan import PlanConfig
        written = write_html(analyze(log, checkpoints=checkpoints, plan=PlanConfig(guard=cfg)), args.html,
                             simulation=sim)
        print(f"lossguard: wrote {written}", file=sys.stderr)
    return 0


def _findings(log, metric: str) -> list:
    """The analyser's whole-log findings on ``metric`` (none when it cannot classify the log)."""
    from ..classify.assemble import find_incidents
    from ..classify.settings import AnalyzeConfig
    from ..errors import LossguardError
    from ..plan import findings
    from ..stitch import stitch

    try:
        return findings(find_incidents(stitch(log), AnalyzeConfig(metric=metric)).incidents)
    except LossguardError:
        return []  # simulate() itself reports a missing loss series


def _describe(sim: Simulation) -> list[str]:
    """The simulation in words, one line per decision (for the terminal)."""
    out = [f"Replayed {sim.steps} steps ({sim.first_step}..{sim.last_step}) through the guard's judge and policy."]
    out += [f"Note: {n}." for n in sim.notes]
    if not sim.decisions:
        out.append("The guard would have done nothing.")
    for d in sim.decisions:
        tag = " (counterfactual)" if d.get("counterfactual") else ""
        ev, step = d["event"], d["step"]
        why = "; ".join(d.get("reasons", []))
        if ev == Action.SKIP.value:
            line = f"step {step}: skip ({why})"
        elif ev == Action.ROLLBACK.value:
            sb = d.get("skip_batches")
            line = (f"step {step}: roll back to checkpoint {d['to_step']} (onset {d['onset']}), skip batches "
                    f"[{sb[0]}, {sb[1]}) ({sb[1] - sb[0]} batches)" if sb
                    else f"step {step}: roll back to checkpoint {d['to_step']}, no data skipped ({why})")
        elif ev == Action.LR_CUT.value:
            until = d.get("until_step")
            line = (f"step {step}: cut the LR x{d['factor']:g} "
                    + ("for the rest of the run" if until is None else f"until step {until}"))
        elif ev == Action.HALT.value:
            line = f"step {step}: HALT ({why}); resume from checkpoint {d.get('resume_from')}"
        else:
            line = f"step {step}: {ev} ({why})"
        out.append(line + tag)
    s = sim.summary()["actions"]
    out.append(f"Total: {s['skip']} skip(s), {s['rollback']} rollback(s), {s['lr_cut']} LR cut(s), "
               f"{s['halt']} halt(s).")
    return out

