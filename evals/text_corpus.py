"""Score lossguard's reading of the console and paste corpora against their MANIFEST.json.

For every entry (schema: CORPUS_SCHEMA in the lead's brief, mirrored in ``tests/data/console`` and
``tests/data/pastes``): is the file read without ``--format``, with the step numbering and the loss
values the manifest gives, does ``analyze`` find each event (kind family, onset within a margin), and
does a healthy entry raise no alarm (an incident of severity warning or critical)? An entry whose text
lacks what the reader needs (the batch size of a sample counter) names the flags in ``read_with`` and
the warning that asks for them in ``warns``: it is read with them, and must give that warning without.

Run ``python -m evals.text_corpus`` from the repository root for the per-entry results, and
``python -m evals.text_corpus --markdown`` for the table of docs/formats.md.
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPORA = {"console": ROOT / "tests" / "data" / "console", "pastes": ROOT / "tests" / "data" / "pastes"}

FAMILIES = {
    "spike": {"spike_fast_recovery", "spike_slow_recovery", "spike_no_recovery", "stream_spike", "resume_spike",
              "grad_norm_spike"},
    "nonfinite": {"non_finite"},
    "divergence": {"divergence", "spike_no_recovery", "level_shift", "regime_change"},
    "level_shift": {"level_shift", "regime_change", "divergence"},
    "drop": {"sudden_drop", "regime_change"},
    "loss_scale_collapse": {"loss_scale_collapse"},
}
"""Manifest event kind -> the incident kinds that name it."""
LOOSE = {"divergence", "level_shift", "drop"}
"""Kinds whose onset is a judgement over a stretch of steps: a wider margin."""


def entries(corpus: str) -> list[dict]:
    """The manifest entries of a corpus (empty when the corpus is not there)."""
    path = CORPORA[corpus] / "MANIFEST.json"
    if not path.exists():
        return []
    return json.loads(path.read_text())["entries"]


@dataclass
class Score:
    """How one entry was read and analysed."""

    file: str
    writer: str
    read: bool = False
    steps_ok: bool = False
    loss_ok: bool = False
    events: int = 0
    found: int = 0
    false_alarms: int = 0
    healthy: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def read_right(self) -> bool:
        """Read, with the manifest's step numbering and loss values."""
        return self.read and self.steps_ok and self.loss_ok


def margin(kind: str, steps) -> float:
    """How far an onset may be from the manifest's step: 3 logging intervals, or 2% of the run
    (10% for the slow kinds)."""
    import numpy as np

    interval = float(np.median(np.diff(steps))) if len(steps) > 1 else 1.0
    span = float(steps[-1] - steps[0]) if len(steps) > 1 else 1.0
    return max(3 * interval, (0.1 if kind in LOOSE else 0.02) * span, 2.0)


def score(corpus: str, entry: dict) -> Score:
    """Read and analyse one entry, as ``lossguard analyze FILE`` does (no ``--format``)."""
    import numpy as np

    from lossguard.analysis import analyze
    from lossguard.errors import LossguardError
    from lossguard.io import read_log

    s = Score(entry["file"], entry["writer"], events=len(entry.get("events") or []), healthy=bool(entry.get("healthy")))
    try:
        # "read_with": the flags a user must pass because the text lacks what they say (the batch
        # size of a sample counter); the entry then also names the warning that asks for them.
        log = read_log(CORPORA[corpus] / entry["file"], **(entry.get("read_with") or {}))
    except LossguardError as exc:
        s.problems.append(f"not read: {exc.what}")
        return s
    if "loss" not in log.series:
        s.problems.append(f"no loss series (read as {log.format}: {', '.join(sorted(log.series)[:6])})")
        return s
    s.read = True
    if entry.get("warns") and not any(entry["warns"] in w for w in _warnings(corpus, entry)):
        s.problems.append(f"read without {entry.get('read_with')}: no warning with '{entry['warns']}'")
        return s
    steps, values = log.live("loss")
    want = entry.get("steps") or {}
    got = {"first": int(steps[0]) if len(steps) else None, "last": int(steps[-1]) if len(steps) else None,
           "count": len(steps)}
    bad = [f"{k} {got[k]} != {want[k]}" for k in ("first", "last", "count") if want.get(k) is not None and got[k] != want[k]]
    s.steps_ok = not bad
    if bad:
        s.problems.append(f"steps ({log.format}): " + ", ".join(bad))
    wrong = []
    # A log that prints only a perplexity is read as log(ppl) (the rule, said in a warning);
    # the manifest stores the printed perplexity, so its spot values are compared as their log.
    ppl = "log of the perplexity" in str((log.metadata.get("text") or {}).get("loss", ""))
    for step, value in (entry.get("loss_at") or {}).items():
        at = np.flatnonzero(steps == int(step))
        if not len(at):
            wrong.append(f"no loss at {step}")
            continue
        v = float(values[at[-1]])
        if ppl and isinstance(value, (int, float)) and value > 0:
            value = math.log(float(value))  # the manifest holds the printed perplexity; the reader its log
        if isinstance(value, str) or value is None:
            ok = not math.isfinite(v)
        else:
            ok = math.isfinite(v) and abs(v - float(value)) <= 1e-3 * max(1.0, abs(float(value)))
        if not ok:
            wrong.append(f"loss at {step} = {v:g}, not {value}")
    s.loss_ok = not wrong
    s.problems += wrong
    try:
        result = analyze(log)
    except LossguardError as exc:
        s.problems.append(f"analyze failed: {exc.what}")
        return s
    alarms = [i for i in result.incidents if str(getattr(i.severity, "value", i.severity)) in ("warning", "critical")]
    if s.healthy:
        s.false_alarms = len(alarms)
        if alarms:
            s.problems.append("false alarm: " + ", ".join(f"{i.kind.value}@{i.onset}" for i in alarms[:4]))
    for event in entry.get("events") or []:
        kinds = FAMILIES.get(event["kind"], {event["kind"]})
        hit = [i for i in result.incidents if i.kind.value in kinds
               and abs(int(i.onset) - int(event["step"])) <= margin(event["kind"], steps)]
        if hit:
            s.found += 1
        else:
            near = ", ".join(f"{i.kind.value}@{i.onset}" for i in result.incidents[:4]) or "no incident"
            s.problems.append(f"{event['kind']}@{event['step']} not found ({near})")
    return s


def _warnings(corpus: str, entry: dict) -> list[str]:
    """The warnings of the entry read without its flags (what tells the user to pass them)."""
    from lossguard.io import read_log

    return list(read_log(CORPORA[corpus] / entry["file"]).metadata.get("warnings") or [])


def main() -> None:
    """Print per-entry and per-corpus results."""
    for corpus in CORPORA:
        rows = [score(corpus, e) for e in entries(corpus)]
        if not rows:
            continue
        print(f"\n== {corpus}: {len(rows)} entries")
        for r in rows:
            flag = "ok " if r.read_right and r.found == r.events and not r.false_alarms else "BAD"
            print(f"{flag} {r.writer:22s} {r.file:45s} read={int(r.read_right)} events {r.found}/{r.events}"
                  f"{'  ' + '; '.join(r.problems)[:200] if r.problems else ''}")
        writers = sorted({r.writer for r in rows})
        healthy = [r for r in rows if r.healthy]
        print(f"read right: {sum(r.read_right for r in rows)}/{len(rows)} files; writers all read right: "
              f"{sum(all(r.read_right for r in rows if r.writer == w) for w in writers)}/{len(writers)}; "
              f"events found: {sum(r.found for r in rows)}/{sum(r.events for r in rows)}; "
              f"healthy without alarm: {sum(r.read and not r.false_alarms for r in healthy)}/{len(healthy)}")



def markdown_table() -> str:
    """The docs table: one row per writer of both corpora, with its fixtures and how they read."""
    rows = ["| Writer | Corpus | Fixtures | Read right | Events found | Healthy without alarm |",
            "|---|---|---|---|---|---|"]
    for corpus in CORPORA:
        scores = [score(corpus, e) for e in entries(corpus)]
        for writer in sorted({s.writer for s in scores}, key=str.lower):
            mine = [s for s in scores if s.writer == writer]
            healthy = [s for s in mine if s.healthy]
            rows.append(f"| {writer} | {corpus} | {', '.join(f'`{s.file}`' for s in mine)} | "
                        f"{sum(s.read_right for s in mine)}/{len(mine)} | {sum(s.found for s in mine)}/"
                        f"{sum(s.events for s in mine)} | {sum(s.read and not s.false_alarms for s in healthy)}/"
                        f"{len(healthy)} |")
    return "\n".join(rows)


if __name__ == "__main__":
    if sys.argv[1:] == ["--markdown"]:
        print(markdown_table())
    else:
        main()
