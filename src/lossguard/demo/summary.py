"""The demo's results in words: the summary lines, the JSON summary, and the index page.

Split from :mod:`lossguard.demo.run` (which trains and writes); everything here is pure formatting
of a :class:`lossguard.demo.run.DemoResult`.
"""
from __future__ import annotations

import html
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .run import DemoResult
    from .train import TrainResult

RUNS = ("clean", "unguarded", "guarded")
"""The demo's runs, in the order they are trained and listed."""


def describe(res: DemoResult) -> list[str]:
    """What happened, in words: one paragraph (list of lines) per run."""
    sc = res.scenario
    what = sc.description
    if sc.pocket is not None:  # from the pocket itself: --steps may have moved it
        what = f"{sc.pocket.length} garbage batches ({sc.pocket.kind}) from step {sc.pocket.start}"
    model = ", ".join(f"{k} {v}" for k, v in sc.model.items())
    lines = [f"Scenario {sc.name}: {what}; {sc.steps} steps, seed {sc.seed}, peak lr {sc.lr:g}, "
             f"tiny GPT ({model}) on the shipped corpus."]
    if res.clean is not None:
        lines.append(f"clean reference: final held-out loss {_f(res.clean.final_val)}.")
    u = res.unguarded
    what = res.headlines.get("unguarded", "")
    if u.diverged:
        state = f"diverged (non-finite loss at step {u.diverged_at})" if u.diverged_at is not None else "diverged"
        lines.append(f"unguarded: {state}; the analyser says: {what}.")
    else:
        lines.append(f"unguarded: final held-out loss {_f(u.final_val)}{_gap(res, u)}; the analyser says: {what}.")
    g = res.guarded
    acts = []
    if g.skipped_steps:
        acts.append(f"skipped {len(g.skipped_steps)} step(s) ({_ranges(g.skipped_steps)})")
    for rb in g.rollbacks:
        sb = rb.get("skip_batches")
        skip = f", skipped batches {sb[0]}..{sb[1] - 1}" if sb else ""
        acts.append(f"rolled back at step {rb['step']} to checkpoint {rb['to_step']}{skip}")
    for cut in g.lr_cuts:
        until = "for the rest of the run" if cut.get("until_step") is None else f"until step {cut['until_step']}"
        acts.append(f"cut the LR x{cut['factor']} from step {cut['step']} {until}")
    if not acts:
        acts.append("took no action")
    if g.halted:
        halt: dict[str, Any] = next((e for e in reversed(g.events) if e.get("event") == "halt"), {})
        why = "; ".join(halt.get("reasons", [])[1:] or halt.get("reasons", []))
        diagnosis = Path(halt["diagnosis"]).name if halt.get("diagnosis") else "-"
        tail = (f"halted at step {halt.get('step', g.steps)} ({why}); resume from checkpoint "
                f"{halt.get('resume_from')}, diagnosis in {diagnosis}"
                f"; held-out loss at the halt {_f(g.final_val)}{_gap(res, g)}")
    else:
        tail = f"final held-out loss {_f(g.final_val)}{_gap(res, g)}"
    lines.append(f"guarded: {'; '.join(_collapse(acts))}; {g.steps_lost} step(s) recomputed after rollbacks; "
                 f"{tail}.")
    return lines


def summary_dict(res: DemoResult) -> dict:
    """JSON summary (``lossguard demo --json`` prints it; ``summary.json`` holds it)."""
    runs = {}
    for name in RUNS:
        r = getattr(res, name)
        if r is None:
            continue
        d = r.to_dict()
        d["vs_clean"] = res.vs_clean(r)
        d["analysis_headline"] = res.headlines.get(name)
        runs[name] = d
    sc = res.scenario
    return {"scenario": {"name": sc.name, "description": sc.description, "steps": sc.steps, "seed": sc.seed,
                         "lr": sc.lr, "model": dict(sc.model),
                         "pocket": None if sc.pocket is None else {"start": sc.pocket.start, "length": sc.pocket.length,
                                                                   "kind": sc.pocket.kind}},
            "runs": runs, "summary": describe(res), "out": str(res.out), "files": list(res.files),
            "wall_time_s": round(res.wall_time, 1)}


def _f(v: float) -> str:
    return f"{v:.4f}" if math.isfinite(v) else "non-finite"


def _gap(res: DemoResult, r: TrainResult) -> str:
    gap = res.vs_clean(r)
    if gap is None:
        return ""
    pct = f"{abs(gap) * 100:.1f}%"
    if abs(gap) < 0.02:
        return f" (within {pct} of clean)"
    return f" ({pct} {'worse' if gap > 0 else 'better'} than clean)"


def _collapse(items: list[str]) -> list[str]:
    """Consecutive repeats written once: ``["a", "a", "b"]`` -> ``["a (x2)", "b"]``."""
    out: list[list] = []
    for it in items:
        if out and out[-1][0] == it:
            out[-1][1] += 1
        else:
            out.append([it, 1])
    return [it if n == 1 else f"{it} (x{n})" for it, n in out]


def _ranges(steps: list[int]) -> str:
    """``[250, 251, 252, 300]`` -> ``"250-252, 300"`` (steps in log order, a rollback may repeat them)."""
    parts: list[str] = []
    start: int | None = None
    prev = 0  # the last step of the current range (meaningful once start is set)
    for s in steps:
        if start is not None and s == prev + 1:
            prev = s
            continue
        if start is not None:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = s
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ", ".join(_collapse(parts))


def _index_html(res: DemoResult, pages: list[tuple[str, str]]) -> str:
    items = "\n".join(f'<li><a href="{html.escape(p)}">{html.escape(n)} run</a>: '
                      f'{html.escape(res.headlines.get(n, ""))}</li>' for n, p in pages)
    summary = "\n".join(f"<p>{html.escape(line)}</p>" for line in describe(res))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>lossguard demo</title>
<style>body{{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;line-height:1.5;padding:0 1rem}}
li{{margin:.4rem 0}}code{{background:#f4f4f4;padding:0 .2rem}}</style></head>
<body><h1>lossguard demo: {html.escape(res.scenario.name)}</h1>
{summary}
<h2>Reports</h2><ul>
{items}
</ul>
<p>Each report is the analyser's reading of that run's JSONL log (<code>lossguard report RUN.jsonl --html ...</code>);
the guarded run's report draws the guard's decisions (skip, rollback, LR cut, halt) on the curve.</p>
</body></html>
"""
