"""The guard's ``suspects`` records (samples it named on a withheld step) grouped by incident: one
definition for the terminal summary, the HTML report, ``--json`` and the guard's own summary.

A record (written by :class:`lossguard.guard.sample_namer.SampleNamer`)::

    {"step": 240, "event": "suspects", "batch_index": 240, "named": true, "method": "loss",
     "suspects": [{"id": 78085, "rank": 0, "row": 30, "share": 0.72, "loss": 68.8, "shows": "..."}],
     "share": 0.96, "passes": {"forward": 1.0, "backward": 0.0}, "seconds": 0.002}

Torch-free (the analyser reads these from a log).
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

SUSPECTS_EVENT = "suspects"
"""The ``event`` of a naming record."""


def suspect_records(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The naming records among a log's events, in log order."""
    return [e for e in events if e.get("event") == SUSPECTS_EVENT and isinstance(e.get("step"), int)]


def by_incident(records: Sequence[dict[str, Any]], incidents: Sequence[Any]) -> tuple[dict[int, list], list]:
    """``({incident index: [records]}, [records matching no incident])``.

    A record belongs to the first incident whose span ``[onset - 1, (end or peak) + 1]`` holds its
    step (the analyser may date an onset a step early or late against the guard's verdict).
    """
    out: dict[int, list] = {}
    rest: list[dict[str, Any]] = []
    for r in records:
        s = r["step"]
        hit = next((i for i, inc in enumerate(incidents)
                    if inc.onset - 1 <= s <= (inc.end if inc.end is not None else inc.peak) + 1), None)
        (out.setdefault(hit, []) if hit is not None else rest).append(r)
    return out, rest


def describe(record: dict[str, Any], *, limit: int = 4) -> str:
    """One record in words: ``step 240: 78085 (72%), 116045 (24%) [loss]`` (or why nobody was named)."""
    sus = record.get("suspects") or []
    if not sus:
        return f"step {record['step']}: nobody named ({record.get('why', 'no sample stands out')})"
    names = []
    for s in sus[:limit]:
        who = _id_text(s.get("id")) if "id" in s else f"row {s.get('row')} of rank {s.get('rank', 0)}"
        shows = f" \u201c{s['shows']}\u201d" if s.get("shows") else ""
        names.append(f"{who} ({100 * float(s.get('share', 0.0)):.0f}%){shows}")
    more = f" and {len(sus) - limit} more" if len(sus) > limit else ""
    why = f"; {record['why']}" if record.get("why") and not record.get("named") else ""
    return f"step {record['step']}: {', '.join(names)}{more} [{record.get('method', '?')}]{why}"


def _id_text(v: Any) -> str:
    if isinstance(v, dict):
        return f"{v.get('dataset')}:{v.get('index')}"
    return str(v)


def summary_lines(records: Sequence[dict[str, Any]], *, limit: int = 20) -> list[str]:
    """Every naming record in words, newest last (the guard's summary and a halt's diagnosis)."""
    lines = [f"  - {describe(r)}" for r in records[-limit:]]
    if len(records) > limit:
        lines.insert(0, f"  ({len(records) - limit} earlier naming(s) not shown)")
    return lines
