"""Run every detector on a stitched log and assemble one list of incidents.

Single-series detectors run on the loss, on each ``loss/<stream>`` and on the grad norm; the
cross-series rules live here: grad-norm episodes that lead a loss event are folded into it, a spike
on one stream of a mix is a stream spike, resume and repeated-data tests run at segment boundaries,
non-finite runs and fp16 loss-scale collapses become incidents of their own. A spike that came
back only part of the way before the baseline climbed is one spike without recovery (not a spike
plus a divergence); a drop that a later spike lifts back into its band is still a drop.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import metrics as M
from ..detect.drop import drop_threshold, is_drop
from ..detect.resume import boundary_indices, dead_vs_live, repeated_after, repeated_ids, resume_spike
from ..detect.outlier import refresh_counts
from ..detect.series import SeriesEvents, detect_series
from ..detect.shift import find_shifts
from ..detect.trend import Divergence
from ..errors import LossguardError
from ..runlog import RunLog
from .classifier import divergence_incident, drop_incident, expected_level, spike_incident
from .companions import grad_norm_spikes, loss_scale_collapses, nonfinite_incidents, stream_spikes
from .incident import Incident, IncidentKind as K
from .settings import AnalyzeConfig


@dataclass
class Found:
    """Incidents plus what the report needs to explain them."""

    incidents: list[Incident]
    metric: str
    interval: int
    notes: list[str] = field(default_factory=list)


def pick_metric(log: RunLog, metric: str | None) -> str:
    """The loss to analyse; a clear error naming what the log has when there is none."""
    if metric is not None:
        name = metric if metric in log.series else M.canonical_name(metric)
        if name not in log.series:
            raise LossguardError(f"no metric {metric!r} in this log; it has {', '.join(log.metrics)}",
                                 path=log.sources[0] if log.sources else None,
                                 fix="pass --metric with one of the names listed")
        return name
    if M.LOSS in log.series:
        return M.LOSS
    streams = [m for m in log.metrics if M.is_loss(m)]
    if streams:
        return streams[0]
    raise LossguardError(f"no training loss in this log; it has {', '.join(log.metrics)}",
                         path=log.sources[0] if log.sources else None,
                         fix="pass --metric NAME to analyse another column")


def log_interval(steps: np.ndarray) -> int:
    """Typical steps between logged points (median gap, at least 1)."""
    return max(1, int(np.median(np.diff(steps)))) if len(steps) > 1 else 1


def _warmup_end(log: RunLog, steps: np.ndarray, window: int) -> int:
    """Last step of the LR warm-up (where the logged LR first peaks, plus one window), or, without an
    LR series, the step two windows into the run."""
    fallback = int(steps[min(len(steps) - 1, 2 * window)]) if len(steps) else 0
    if M.LR not in log.series:
        return fallback
    s, v = log.live(M.LR)
    ok = np.isfinite(v)
    if ok.sum() < 3:
        return fallback
    s, v = s[ok], v[ok]
    peak = int(np.argmax(v >= 0.999 * v.max()))
    if peak == 0:  # no warm-up (constant or decaying from the start)
        return int(steps[min(len(steps) - 1, window)]) if len(steps) else 0
    i = int(np.searchsorted(steps, s[peak]))
    return int(steps[min(len(steps) - 1, i + window)])


def _gradual(ev: SeriesEvents, ep) -> bool:
    """True when less than half of an episode's early excess arrived in a jump at its onset."""
    x = ev.values
    if ep.onset < 5:
        return False
    pre = float(np.median(x[ep.onset - 5:ep.onset]))
    early = float(np.median(x[ep.onset:ep.onset + 3]))
    return early > ep.base and (early - pre) < 0.5 * (early - ep.base)


def _overlap(a0: int, a1: int, b0: int, b1: int) -> bool:
    return a0 <= b1 and b0 <= a1


def _stream_names(log: RunLog, metric: str) -> list[str]:
    return [M.stream_of(m) for m in log.metrics if M.stream_of(m) is not None and m != metric]


def find_incidents(log: RunLog, cfg: AnalyzeConfig) -> Found:
    """Every incident of a stitched run, in onset order."""
    metric = pick_metric(log, cfg.metric)
    steps, values = log.live(metric)
    k = log_interval(steps)
    dcfg = cfg.for_interval(k)
    lag = dcfg.outlier.window // 2
    streams = _stream_names(log, metric) if metric == M.LOSS else []
    ev = detect_series(steps, values, dcfg)
    found = Found([], metric, k)
    if len(ev.values) and np.isfinite(ev.noise).any():
        med, nz = np.nanmedian(ev.baseline), np.nanmedian(ev.noise)
        if abs(med) < dcfg.outlier.min_snr * nz:
            found.notes.append(f"The {metric} sits at zero within its noise (median {med:.3g}, noise {nz:.3g}), "
                               "like an RL objective: spike tests abstain where no level can be told from noise.")
    out = found.incidents
    boundaries = boundary_indices(log, ev.steps)
    near = {b: (seg, kind) for seg, b, kind in boundaries}

    def at_boundary(i: int, width: int) -> int | None:
        for b in range(i - width + 1, i + 1):
            if b in near:
                return b
        return None

    # Repeated data at boundaries.
    claimed: set[int] = set()
    explained: list[tuple[int, int]] = []
    quiet: list[tuple[int, int]] = []  # stretches whose baseline rise is explained (no divergence)
    for seg, b, kind in boundaries:
        f = repeated_after(ev.values, b, seg, cfg.resume)
        dl = dead_vs_live(log, metric, seg) if kind == "rollback" else None
        # A consistent gap (median well above its spread), not one first-pass spike the rollback erased.
        dl_hit = dl is not None and dl["median_diff"] > max(3 * dl["spread"] / np.sqrt(dl["matched"]),
                                                            1.5 * dl["spread"], 0.01 * abs(dl["level"]))
        if f is None:
            # A live pass below the first pass alone is also what a rollback over a spike looks like
            # (the first pass was the elevated one). Repeated data must also sit below the trend.
            if dl_hit:
                found.notes.append(
                    f"The rollback to step {dl['first_step']} replaced a first pass that ran {dl['median_diff']:.3g} "
                    f"higher over steps {dl['first_step']}-{dl['last_step']} (superseded points are not analysed): "
                    "the rollback removed an excursion.")
            continue
        st = ev.steps
        evidence = []
        if dl_hit:
            evidence.append(f"after the rollback the live loss is {dl['median_diff']:.3g} below the first pass over the "
                            f"same {dl['matched']} steps ({dl['first_step']}-{dl['last_step']})")
        if f is not None:
            evidence += f.evidence
        end = f.end if f is not None else None
        peak = f.peak if f is not None else b
        level = f.level if f is not None else float(dl["level"])
        excess = f.excess if f is not None else -float(dl["median_diff"])
        noise = f.noise if f is not None else float(np.nanmedian(ev.noise[max(0, b - 64):b + 1]))
        out.append(Incident(K.REPEATED_DATA, metric, int(st[b]), int(st[peak]), None if end is None else int(st[end]),
                            level, float(ev.values[peak]), excess, excess / noise if noise > 0 else float("-inf"),
                            None, streams, "warning",
                            "The data stream seems to have restarted at the resume: " + "; ".join(evidence) + ".",
                            {"segment": seg, "dead_vs_live": dl, **(f.details if f is not None else {})}))
        claimed.add(b)
        if end is not None:  # the step back up to fresh data is part of this incident, not a spike
            h = cfg.resume.level_points
            w = dcfg.outlier.window
            explained.append((int(st[max(0, end - 2 * h)]), int(st[min(len(st) - 1, end + w)])))
            quiet.append((int(st[b]), int(st[end]) + 2 * lag * k))
    for name, first, count in repeated_ids(log):
        out.append(Incident(K.REPEATED_DATA, name, first, first, None, float("nan"), float("nan"), float(count),
                            float("nan"), None, [], "warning",
                            f"{count} steps saw a {name} that an earlier step had already seen, first at step {first}.",
                            {"repeats": count}))
    # A divergence stands unless an earlier episode explains its rise (a spike that turned into
    # divergence) or repeated data does; unrecovered episodes after it are part of it.
    st = ev.steps
    standing = []
    turned: dict[int, Divergence] = {}  # id(spike episode) -> the divergence it turned into
    budget = dcfg.spike.budget_points
    for d in ev.divergences:
        a, z = int(st[d.minimum_at]), int(st[d.trigger])
        if any(_overlap(a, z, s0, s1 + lag * k) for s0, s1 in quiet):
            continue
        if any(e.onset <= d.trigger and _overlap(a, z, int(st[e.onset]), int(st[e.closed]) + lag * k)
               for e in ev.spikes):
            continue
        if any(e.end is None and e.onset <= d.minimum_at <= e.closed + lag for e in ev.spikes):
            continue  # the climb continues an unrecovered spike: "turning into divergence"
        # A spike that came "back" but whose loss never returned to its pre-spike trend before this
        # climb began (the climb's minimum sits above the trend extrapolated past the spike) only
        # recovered part of the way, then turned into divergence: one incident, the spike's.
        before = [e for e in ev.spikes if e.end is not None and e.closed < d.minimum_at <= e.closed + budget
                  and d.minimum - float(expected_level(ev, e, int(st[d.minimum_at]))) > cfg.settled_rel * abs(e.base)]
        if before:
            turned[id(before[-1])] = d
            standing.append(d)
            continue
        standing.append(d)
        out.append(divergence_incident(ev, d, metric, lag, streams))
    # Loss spikes, shifts, resume spikes.
    spans: list[tuple[int, int]] = []
    resumed: set[int] = set()
    for ep in ev.spikes:
        if any(a <= int(ev.steps[ep.onset]) <= z for a, z in explained):
            continue
        if ep.end is None and any(d.trigger <= ep.onset and (d.end is None or ep.onset <= d.end) for d in standing):
            continue
        if ep.end is None and _gradual(ev, ep):
            # Not a jump: a rising curve outran its trailing baseline. That is a divergence.
            lo = max(0, ep.onset - dcfg.spike.budget_points)
            b = ev.baseline[lo:ep.onset + 1]
            if np.isfinite(b).any():
                low = lo + int(np.nanargmin(b))
                if any(e.onset < ep.onset and _overlap(int(st[low]), int(st[ep.onset]), int(st[e.onset]),
                                                       int(st[e.closed]) + lag * k) for e in ev.spikes):
                    continue  # the climb continues an earlier spike (one that turned into divergence)
                mn, nz = float(ev.baseline[low]), float(ev.noise[low])
                th = max(dcfg.trend.rise_z * nz, dcfg.trend.rise_rel * abs(mn))
                near = np.flatnonzero(ev.baseline[low:ep.onset + 1] <= mn + dcfg.trend.near_fraction * th)
                turn = low + int(near[-1])
                d = Divergence(turn, low, ep.onset, None, mn, nz, 0.0)
                standing.append(d)
                out.append(divergence_incident(ev, d, metric, lag, streams))
                spans.append((int(st[turn]), int(st[ep.closed])))
                continue
        inc = spike_incident(ev, ep, metric, cfg, k, streams)
        if id(ep) in turned:
            d = turned[id(ep)]
            inc.kind, inc.end, inc.recovery_steps, inc.severity = K.SPIKE_NO_RECOVERY, None, None, "critical"
            inc.evidence = (f"The {metric} rose {inc.magnitude:.3g} ({inc.magnitude_sigma:.1f} sigma) above its pre-event "
                            f"level {ep.base:.4g} at step {int(st[ep.peak])}, came back part of the way, but never to its "
                            f"pre-event trend: from step {int(st[d.minimum_at])} (at {d.minimum:.4g}) it rose again and "
                            "kept rising (turning into divergence).")
            inc.details["turned_into_divergence_at"] = int(st[d.minimum_at])
        if inc.kind in (K.LEVEL_SHIFT, K.SPIKE_NO_RECOVERY) and any(
                d.trigger <= ep.onset and (d.end is None or ep.onset <= d.end) for d in standing):
            continue  # "settled higher" than a trend that was already diverging: part of the divergence
        b = at_boundary(ep.onset, cfg.resume.spike_points)
        if b is not None and inc.end is not None:
            inc.kind = K.RESUME_SPIKE
            inc.severity = "info"
            inc.evidence += f" It began {int(ev.steps[ep.onset] - ev.steps[b])} steps after a resume at step {int(ev.steps[b])}."
            resumed.add(b)
        spans.append((int(ev.steps[ep.onset]), int(ev.steps[ep.closed])))
        out.append(inc)
    for seg, b, kind in boundaries:
        if b in resumed or any(_overlap(int(ev.steps[b]), int(ev.steps[b]), a, z) for a, z in spans):
            continue
        f = resume_spike(ev.values, b, seg, cfg.resume)
        if f is not None:
            st = ev.steps
            out.append(Incident(K.RESUME_SPIKE, metric, int(st[f.onset]), int(st[f.peak]),
                                None if f.end is None else int(st[f.end]), f.level, f.level + f.excess, f.excess,
                                f.excess / f.noise, None if f.end is None else int(st[f.end] - st[f.peak]),
                                streams, "info", f"The {metric} rose " + f.evidence[0] + ".", f.details))
            spans.append((int(st[f.onset]), int(st[f.end if f.end is not None else f.peak])))
    # Drops (dips at a resume are repeated data, not drops).
    persist = dcfg.drop.persist_points
    w = dcfg.outlier.window
    warm_end = _warmup_end(log, st, w)
    for ep in ev.dips:
        b = at_boundary(ep.onset, cfg.resume.level_points)
        # Back "in band" because a spike lifted the loss there is not a recovery from the drop.
        lifted = ep.end is not None and ep.end - ep.onset >= persist and any(
            sp.onset <= ep.closed + dcfg.dip.settle and ep.end <= sp.closed for sp in ev.spikes)
        if b is not None or not (is_drop(ep, dcfg.drop) or lifted) or int(st[ep.onset]) <= warm_end:
            continue  # a flat start then a steep fall is the LR warm-up, not grokking
        if any(_overlap(int(st[ep.onset]), int(st[ep.onset]), s0, s1 + w * k) for s0, s1 in spans + quiet):
            continue  # the way back down from a spike or shift, measured from a raised baseline
        inc = drop_incident(ev, ep, metric, dcfg.drop, streams)
        if not -inc.magnitude >= float(drop_threshold(dcfg.outlier, dcfg.drop, ep.base, ep.noise, False)):
            continue  # the level after the fall is not far enough below: one deep stretch, not a drop
        out.append(inc)
    # Level shifts too small for the point test: steps in the window medians that stay.
    refresh = refresh_counts(len(ev.values), dcfg.outlier)
    for sh in find_shifts(ev.values, ev.baseline, ev.noise, refresh, dcfg.outlier.window, cfg.shift):
        a = int(st[max(0, sh.at - w)])
        z = int(st[min(len(st) - 1, sh.at + w)])
        if any(_overlap(a, z, s0, s1) for s0, s1 in spans + quiet + explained) \
                or any(_overlap(a, z, int(st[d.minimum_at]), int(st[-1]) if d.end is None else int(st[d.end]))
                       for d in standing) or at_boundary(sh.at, 2 * cfg.resume.level_points) is not None:
            continue  # (a step right at a resume belongs to the resume; one a window later does not)
        onset = sh.at
        while onset > 0 and ev.values[onset - 1] - sh.level_before > 0.5 * sh.jump and sh.at - onset < 16:
            onset -= 1
        out.append(Incident(K.LEVEL_SHIFT, metric, int(st[onset]), int(st[sh.at]), None, sh.level_before,
                            sh.level_before + sh.jump, sh.jump, sh.jump / sh.noise if sh.noise > 0 else float("inf"),
                            None, streams, "warning",
                            f"The {metric} stepped up by {sh.jump:.3g} ({sh.jump / abs(sh.level_before):.0%}) against its "
                            f"trend around step {int(st[sh.at])} and stayed there a window later: a new level, too "
                            "small for a spike, seen in the medians of whole windows.",
                            {"jump": sh.jump, "test": "window-median step"}))
    stream_spikes(log, metric, dcfg, cfg, k, out, explained)
    grad_norm_spikes(log, dcfg, cfg, k, out)
    nonfinite_incidents(log, metric, out)
    loss_scale_collapses(log, cfg, out)
    out.sort(key=lambda i: (i.onset, i.kind.value))
    return found
