"""Sudden drops as incidents: where the fall began, how far it went, in words.

:func:`drop_incident` turns a down-episode of the windowed drop test
(:mod:`lossguard.detect.drop`) into an incident; :func:`wide_drop_incident` does the same for a fall
wider than the trailing window (:func:`lossguard.detect.drop.find_wide_drops`). Both date the onset
at the knot of the best continuous two-piece linear fit (slow stretch, then the fall).
"""
from __future__ import annotations

import numpy as np

from ..detect.drop import DropConfig, WideDrop
from ..detect.episode import Excursion
from ..detect.knot import best_knot
from ..detect.series import SeriesEvents
from ..recovery.severity import Severity
from .classifier import refine_onset, running_median
from .incident import Incident, IncidentKind as K


def drop_incident(ev: SeriesEvents, ep: Excursion, metric: str, cfg: DropConfig, streams: list[str],
                  window: int = 0) -> Incident:
    """A steep, persistent fall after a slow stretch.

    The detector decides once the median of the last few points is below the baseline, part-way
    down. The onset reported is where the fall began: the knot of the best continuous two-piece
    linear fit (slow stretch, then the fall) from before the fall up to where 90% of it was reached.
    The baseline the decision compares with is the median of the trailing ``window`` points, so a
    wide fall can have begun up to a window before the decision: the fit starts a window (at least
    a span) before it.
    """
    x, st = ev.values, ev.steps
    persist = cfg.persist_points
    a, b = ep.onset + persist // 2, min(len(x), ep.onset + persist)
    fall = ep.base - float(np.median(x[a:b])) if b > a else ep.base - ep.peak_value
    reach = np.flatnonzero(ep.base - running_median(x[ep.onset:b], 5) >= 0.9 * fall)
    peak = ep.onset + int(reach[0]) if len(reach) else ep.peak
    lo = max(0, ep.onset - max(cfg.span_points, window) - cfg.smooth_points)
    k = best_knot(running_median(x[lo:peak + 1], 5), margin=2)
    onset = lo + k if k is not None else refine_onset(ev, ep, -1.0, 100)
    sigma = fall / ep.noise if ep.noise > 0 else float("inf")
    evidence = (f"The {metric} fell {fall:.3g} ({fall / abs(ep.base):.0%}, {sigma:.1f} sigma) below its level "
                f"{ep.base:.4g} within {int(st[peak] - st[onset])} steps, after a slow stretch, and stayed down.")
    return Incident(kind=K.SUDDEN_DROP, metric=metric, onset=int(st[onset]), peak=int(st[peak]), end=int(st[peak]),
                    baseline=ep.base, peak_value=float(x[peak]), magnitude=-fall, magnitude_sigma=-sigma,
                    recovery_steps=int(st[peak] - st[onset]), streams=streams, severity=Severity.INFO,
                    evidence=evidence,
                    details={"relative": -fall / abs(ep.base) if ep.base else None, "detected_at": int(st[ep.onset])})


def wide_drop_incident(ev: SeriesEvents, w: WideDrop, metric: str, streams: list[str]) -> Incident:
    """A fall wider than the trailing window (:func:`lossguard.detect.drop.find_wide_drops`), dated
    like :func:`drop_incident`: the knot of the best two-piece linear fit (slow stretch, then the fall)
    from two scales before the lower level to where it reached 90% of the fall."""
    x, st = ev.values, ev.steps
    fall = w.level_before - w.level_after
    lo, hi = max(0, w.at - 2 * w.scale), min(len(x), w.at + w.scale)
    sm = running_median(x[lo:hi], 5)
    reach = np.flatnonzero(w.level_before - sm >= 0.9 * fall)
    peak = lo + int(reach[0]) if len(reach) else w.at
    k = best_knot(sm[:peak - lo + 1], margin=2)
    onset = lo + k if k is not None else w.at
    sigma = fall / float(np.nanmedian(ev.noise)) if np.isfinite(ev.noise).any() else float("inf")
    evidence = (f"The {metric} fell {fall:.3g} ({fall / abs(w.level_before):.0%}) from {w.level_before:.4g} to "
                f"{w.level_after:.4g} over {int(st[peak] - st[onset])} steps, several times faster than over the "
                f"stretch before, and stayed down: a drop wider than the {w.scale}-point scale it was measured on.")
    return Incident(kind=K.SUDDEN_DROP, metric=metric, onset=int(st[onset]), peak=int(st[peak]), end=int(st[peak]),
                    baseline=w.level_before, peak_value=float(x[peak]), magnitude=-fall, magnitude_sigma=-sigma,
                    recovery_steps=int(st[peak] - st[onset]), streams=streams, severity=Severity.INFO,
                    evidence=evidence,
                    details={"relative": -fall / abs(w.level_before), "scale_points": w.scale, "test": "wide drop"})
