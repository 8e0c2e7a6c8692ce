"""watch's engine decides the same incidents, at the same steps, as analyze on the finished log.

Logs are replayed into the engine point batch by point batch, launch by launch (as a follower hands
them over), polling after every batch, then finished; the incidents left standing must equal
``analyze``'s. Synthetic runs cover every kind (with their resumes, rollbacks and data outliers);
the real logs in tests/data/real-logs cover real noise; a small history covers the bounded case.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lossguard.analysis import analyze
from lossguard.classify.incident import IncidentKind as K
from lossguard.io import read_log
from evals.synthetic import generate_run
from lossguard.watch.engine import WatchConfig, WatchEngine
from lossguard.watch.events import EventKind
from lossguard.watch.history import Points, RunHistory

REAL = Path(__file__).parent / "data" / "real-logs"


def replay(log, batch: int):
    """The log's points as a follower would hand them over: per launch, ``batch`` steps at a time."""
    for g in log.segments:
        per = {}
        for name, s in log.series.items():
            m = s.segment == g.index
            per[name] = (s.steps[m], s.values[m])
        steps = np.unique(np.concatenate([a for a, _ in per.values()]))
        for i in range(0, len(steps), batch):
            lo, hi = steps[i], steps[min(i + batch, len(steps)) - 1]
            series = {}
            for name, (st, v) in per.items():
                a, b = np.searchsorted(st, lo), np.searchsorted(st, hi, side="right")
                if b > a:
                    series[name] = (st[a:b], v[a:b])
            yield Points(g.source, series, new_segment=i == 0, note=g.note, start_time=g.start_time)


def follow(log, batch: int = 7, config: WatchConfig | None = None):
    eng = WatchEngine("run", config)
    events = []
    for pts in replay(log, batch):
        eng.feed(pts)
        events += eng.poll()
    events += eng.finish()
    return eng, events


def kinds_at(incidents):
    return sorted((i.kind.value, i.metric, i.onset) for i in incidents)


CASES = [(K.SPIKE_FAST, 1, None), (K.SPIKE_SLOW, 2, None), (K.SPIKE_NO_RECOVERY, 3, 3000), (K.DIVERGENCE, 30, None),
         (K.LEVEL_SHIFT, 18, None), (K.SUDDEN_DROP, 6, None), (K.NON_FINITE, 20, None), (K.STREAM_SPIKE, 21, None),
         (K.LOSS_SCALE_COLLAPSE, 22, None), (K.GRAD_NORM_SPIKE, 36, None), (K.REPEATED_DATA, 11, 3000),
         (K.RESUME_SPIKE, 25, None), (None, 26, None)]


@pytest.mark.parametrize("kind,seed,length", CASES, ids=[str(c[0] and c[0].value) for c in CASES])
def test_same_incidents_as_analyze_on_synthetic_runs(kind, seed, length):
    run = generate_run(kind, seed=seed, length=length)
    want = kinds_at(analyze(run.log).incidents)
    eng, events = follow(run.log)
    assert kinds_at(eng.incidents()) == want
    printed = [e for e in events if e.kind is EventKind.INCIDENT]
    assert len({(e.incident.metric, e.incident.onset, e.incident.kind) for e in printed}) == len(printed)  # once each
    if kind is not None and want:
        assert printed, "incidents are printed before the end when they are decided"


@pytest.mark.parametrize("name", sorted(p.name for p in REAL.glob("*.csv")))
def test_same_incidents_as_analyze_on_real_logs(name):
    log = read_log(REAL / name)
    eng, _ = follow(log, batch=1)
    assert kinds_at(eng.incidents()) == kinds_at(analyze(log).incidents)


def test_bounded_history_still_matches_past_its_capacity():
    # 36k points through a history of 8192: the oldest points are dropped many times over.
    run = generate_run(K.LEVEL_SHIFT, seed=31)
    assert len(run.log.series["loss"]) > 4 * 8192
    eng, _ = follow(run.log, batch=50, config=WatchConfig(history_points=8192))
    assert eng.history.points("loss") <= 8192 and eng.history.dropped("loss") > 28000
    want = kinds_at(analyze(run.log).incidents)
    assert kinds_at(eng.incidents()) == want
    # Catching up on a finished log: each launch handed over in one batch, far over the capacity.
    eng, _ = follow(run.log, batch=10**6, config=WatchConfig(history_points=8192))
    assert kinds_at(eng.incidents()) == want


def test_spike_is_alerted_at_its_own_step_and_decided_when_it_recovers():
    run = generate_run(K.SPIKE_FAST, seed=1)
    spike = next(i for i in analyze(run.log).incidents if i.kind is K.SPIKE_FAST)
    eng = WatchEngine("run")
    alert_at = decided_at = None
    for pts in replay(run.log, 1):
        eng.feed(pts)
        step = int(pts.series["loss"][0][-1]) if "loss" in pts.series else None
        for ev in eng.poll():
            if ev.kind is EventKind.ALERT and alert_at is None and ev.step == spike.onset:
                alert_at = step
            if ev.kind is EventKind.INCIDENT and ev.incident.onset == spike.onset:
                decided_at = step
    assert alert_at == spike.onset
    assert decided_at is not None and spike.end <= decided_at <= spike.end + 10 * run.params["log_every"]


def test_history_memory_is_flat():
    h = RunHistory(capacity=4096, block=1024)
    steps = np.arange(200_000)
    for i in range(0, len(steps), 1000):
        h.add(Points("f", {"loss": (steps[i:i + 1000], np.ones(1000)), "lr": (steps[i:i + 1000], np.ones(1000))}))
    assert h.points("loss") <= 4096 and h.points("lr") <= 4096
    log = h.to_runlog()
    assert int(log.series["loss"].steps[-1]) == 199_999 and len(log.series["loss"]) <= 4096


def test_config_is_validated():
    from lossguard.errors import ConfigError
    with pytest.raises(ConfigError, match="history_points"):
        WatchConfig(history_points=10)


def test_printed_incident_is_updated_when_its_kind_changes_and_withdrawn_when_gone(monkeypatch):
    """The bookkeeping between classifications, with the classification itself stubbed."""
    from lossguard.analysis import Analysis
    from lossguard.classify.incident import Incident
    import lossguard.watch.engine as engine

    eng = WatchEngine("run")
    steps = np.arange(1, 4001)  # the spike at 1000 is more than an episode budget (2000 points) old
    eng.feed(Points("f", {"loss": (steps, 2.0 + 0.01 * np.sin(steps))}))
    answer: list[Incident] = []
    monkeypatch.setattr(engine, "analyze", lambda log, **kw: Analysis(log=log, incidents=list(answer)))

    def spike(kind, end):
        return Incident(kind, "loss", 1000, 1001, end, 2.0, 6.0, 4.0, 400.0)

    answer[:] = [spike(K.SPIKE_FAST, 1003)]
    eng._due = True
    first = eng.poll()
    assert [e.kind for e in first] == [EventKind.INCIDENT] and first[0].incident.kind is K.SPIKE_FAST
    eng._due = True
    assert eng.poll() == []  # the same incident again: printed once
    answer[:] = [spike(K.SPIKE_NO_RECOVERY, None)]
    eng._due = True
    upd = eng.poll()
    assert [e.kind for e in upd] == [EventKind.UPDATE]
    assert upd[0].previous_kind is K.SPIKE_FAST and upd[0].incident.kind is K.SPIKE_NO_RECOVERY
    answer[:] = []
    gone = eng.finish()
    assert [e.kind for e in gone] == [EventKind.WITHDRAWN] and eng.incidents() == []
