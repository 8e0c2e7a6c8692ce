"""Events -> incidents: one kind from the taxonomy per event, with the evidence that decided it.

The detectors (:mod:`lossguard.detect`) say *where* something happened; this module decides *what*
it was, by the rules below, and writes the reason in words.

* An upward episode of the loss that came back within ``fast_steps`` of its peak is a fast spike,
  later a slow spike (back means back on the extrapolated trend, and still there over the next
  ``settle_steps``). One that did not come back is a **level shift** when it kept at least
  ``shift_ratio`` of its early excess (the largest of its first three points, less what noise
  alone adds to the largest of three) and its tail is flat, otherwise a **spike without recovery**
  (with "turning into divergence" when the tail still rises).
* An episode starting within a few points of a resume is a **resume spike** (if it recovered).
* A divergence of the baseline not explained by an episode is a **divergence**, or a **level shift**
  when one step up carries most of the rise.
* A steep, persistent fall is a **sudden drop** (:mod:`.drops`); a dip right after a resume is
  **repeated data**.
* Grad-norm episodes that lead or overlap a loss event become evidence on it; the others are
  **grad-norm spikes** ("the loss has not moved").
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..detect.episode import Excursion
from ..detect.knot import best_bend
from ..detect.series import SeriesEvents
from ..detect.trend import Divergence
from ..recovery.severity import Severity
from .incident import Incident, IncidentKind as K
from .settings import AnalyzeConfig


def refine_onset(ev: SeriesEvents, ep: Excursion, sign: float, lookback: int) -> int:
    """Move an episode's onset back to where the departure began (> 2 frozen sigma from the baseline)."""
    x = ev.values
    lo = max(0, ep.onset - lookback)
    prior = (x[lo:ep.onset] - ep.base) * sign > 2.0 * ep.noise
    if not len(prior) or not prior[-1]:
        return ep.onset
    inside = np.flatnonzero(~prior)
    return lo + (int(inside[-1]) + 1 if len(inside) else 0)


def expected_level(ev: SeriesEvents, ep: Excursion, step) -> float | np.ndarray:
    """The pre-event trend extrapolated to ``step`` (scalar or array): linear in log(step), declining only.

    The frozen baseline is the median of the window before onset, centred half a window earlier.
    The slope is the smaller decline of the two windows before that (a drop or a bump in one of them
    must not be extrapolated), per unit of log(step). A loss curve is close to linear in log(step)
    over a few windows; a power law flattens, so this errs towards expecting a little more decline.
    """
    w = 128
    i = ep.onset
    scalar = np.ndim(step) == 0
    step = np.asarray(step, dtype=np.float64)
    flat = np.full(step.shape, ep.base)
    if i < 3 * w and i >= 3 * SHORT_TREND_WINDOW:
        # Fewer points before the event than three windows: the same slopes from medians of three
        # thirds of them (a shift 300 points into a fine-tune is still on a falling curve).
        w = i // 3
        b1, b0 = (float(np.median(ev.values[i - k * w:i - (k - 1) * w])) for k in (2, 3))
    elif i < 3 * w or not (np.isfinite(ev.baseline[i - w]) and np.isfinite(ev.baseline[i - 2 * w])):
        return float(flat) if scalar else flat
    else:
        b1, b0 = float(ev.baseline[i - w]), float(ev.baseline[i - 2 * w])
    t1, t0, tm = (float(ev.steps[i - w // 2]), float(ev.steps[i - w - w // 2]), float(ev.steps[i - 2 * w - w // 2]))
    if not (0 < tm < t0 < t1):
        return float(flat) if scalar else flat
    s1 = (ep.base - b1) / np.log(t1 / t0)
    s0 = (b1 - b0) / np.log(t0 / tm)
    slope = min(0.0, max(s1, s0))  # the gentler of the two declines; never a rise
    out = ep.base + slope * np.log(np.maximum(step, t1) / t1)
    return float(out) if scalar else out


SHORT_TREND_WINDOW = 32
"""The shortest window :func:`expected_level` estimates a pre-event slope from (three of them)."""
NEXT_POINT = 1
"""A spike back on its trend this many logged points after its peak recovered at the next point."""
POINT_BAND_Z = 3.0
"""A single point is back on the trend within this many (frozen) noise units of it..."""


def _points_to_recover(ev: SeriesEvents, ep: Excursion, end: int, end_rel: float) -> int:
    """Logged points from the peak to the first single point back within the band of the pre-event
    trend (at most ``end - peak``, where the smoothed test confirmed the recovery)."""
    x, st = ev.values, ev.steps
    if end <= ep.peak:
        return 0
    after = np.arange(ep.peak + 1, end + 1)
    exp = expected_level(ev, ep, st[after])
    band = max(POINT_BAND_Z * ep.noise, end_rel * abs(ep.base))
    back = np.flatnonzero(x[after] - exp <= band)
    return int(back[0]) + 1 if len(back) else end - ep.peak


def _magnitude(ep: Excursion) -> tuple[float, float]:
    excess = ep.peak_value - ep.base
    return excess, excess / ep.noise if ep.noise > 0 else float("inf")


def spike_incident(ev: SeriesEvents, ep: Excursion, metric: str, cfg: AnalyzeConfig, interval: int,
                   streams: list[str]) -> Incident:
    """Classify one upward loss episode."""
    st = ev.steps
    onset = refine_onset(ev, ep, 1.0, 10)
    excess, sigma = _magnitude(ep)
    rel = excess / abs(ep.base) if ep.base else float("inf")
    details: dict[str, Any] = {"relative": rel, "ratio": ep.peak_value / ep.base if ep.base else None,
                               "status": ep.status, "detected_at": int(st[ep.onset]), "closed_at": int(st[ep.closed])}
    what = f"rose {rel:.0%} ({sigma:.1f} sigma) above its pre-event level {ep.base:.4g} at step {int(st[ep.peak])}"
    settled_higher = None
    end = ep.end
    if end is not None:
        # Back on the frozen pre-event *level*; when was it back on the pre-event *trend*? A loss that
        # kept falling before the spike should keep falling after it; the frozen level (a trailing
        # median, half a window behind) is lenient. Search from the online end for the first
        # 5-point median within the band of the extrapolated trend.
        x = ev.values
        h = 5
        seg = x[end:end + cfg.for_interval(interval).spike.budget_points]
        if len(seg) >= h:
            med = np.median(np.lib.stride_tricks.sliding_window_view(seg, h), axis=1)
            exp = expected_level(ev, ep, st[end + h // 2:end + h // 2 + len(med)])
            band = max(3 * 1.2533 * ep.noise / np.sqrt(h), cfg.detectors.spike.end_rel * abs(ep.base))
            back = np.flatnonzero(med - exp <= band)
            if len(back):
                end = end + int(back[0])  # windows slide from the online end: 0 = agreed
                # ...and stayed there: one 5-point median of a noisy run can dip into the band while
                # the loss settles higher. The median of the next settle_steps must be back too.
                d = max(10, cfg.settle_steps // interval)
                after = x[end:end + d]
                if len(after) >= d:
                    level = float(np.median(after))
                    settled_higher = (level, float(expected_level(ev, ep, int(st[end + d // 2]))))
                    if level - settled_higher[1] <= cfg.settled_rel * abs(ep.base):
                        settled_higher = None
            else:
                d = max(10, cfg.settle_steps // interval)
                level = float(np.median(seg[:d]))
                settled_higher = (level, float(expected_level(ev, ep, int(st[min(len(st) - 1, end + d // 2)]))))
                if level - settled_higher[1] <= cfg.settled_rel * abs(ep.base):
                    settled_higher = None  # within the extrapolation's own error: call it recovered
        details["online_end"] = int(st[ep.end])
    if end is not None and settled_higher is None:
        rec = int(st[end] - st[ep.peak])
        # Recovery in logged points too: the first point after the peak back within 3 sigma of the
        # pre-event trend. A log that samples every 200 steps cannot resolve a recovery below its
        # interval, so a spike back at the next logged point is fast whatever the steps say.
        pts = _points_to_recover(ev, ep, end, cfg.detectors.spike.end_rel)
        details["points_to_recover"] = pts
        fast = rec <= cfg.fast_steps or pts <= NEXT_POINT
        kind = K.SPIKE_FAST if fast else K.SPIKE_SLOW
        if rec > cfg.fast_steps and fast:
            end = ep.peak + pts  # the smoothed end sits half a settle window later, which is steps, not recovery
            rec = int(st[end] - st[ep.peak])
            evidence = (f"The {metric} {what} and was back on its pre-event trend at the next logged point, "
                        f"{int(st[ep.peak + 1] - st[ep.peak])} steps later: a one-point outlier (recovery cannot be "
                        "resolved below the logging interval).")
        else:
            budget = "within" if fast else "beyond"
            evidence = (f"The {metric} {what} and was back on its pre-event trend {rec} steps later "
                        f"({budget} the {cfg.fast_steps}-step fast budget).")
        sev = Severity.WARNING if (not fast or rel >= 0.5) else Severity.INFO
        return Incident(kind=kind, metric=metric, onset=int(st[onset]), peak=int(st[ep.peak]), end=int(st[end]),
                        baseline=ep.base, peak_value=ep.peak_value, magnitude=excess, magnitude_sigma=sigma,
                        recovery_steps=rec, streams=streams, severity=sev, evidence=evidence, details=details)
    x = ev.values
    # The largest of the first three points, less the amount by which noise alone lifts the largest
    # of three (E[max of 3 standard normals] = 0.846 sigma): the height of a spike's peak or of a
    # step, not of the step's noisiest point.
    early = float(np.max(x[ep.onset:ep.onset + 3])) - 0.846 * ep.noise - ep.base
    d = max(10, cfg.settle_steps // interval)
    if ep.onset + 2 * d <= ep.closed + 1:
        settled = float(np.median(x[ep.onset + d:ep.onset + 2 * d]))
        t_settled = st[ep.onset + d + d // 2]
    else:
        settled = ep.settled
        t_settled = st[max(ep.onset, ep.closed - cfg.detectors.spike.tail_points // 2)]
    expected = expected_level(ev, ep, int(t_settled))
    settled_excess = settled - expected
    if settled_higher is not None:
        settled, expected = settled_higher
        settled_excess = settled - expected
    kept = settled_excess / early if early > 0 else 0.0
    rising = ep.tail_rise > max(3.0 * ep.noise, 0.02 * abs(ep.base))
    details.update(settled=settled, expected=expected, kept_fraction=kept, tail_rise=ep.tail_rise,
                   turning_into_divergence=bool(rising))  # structured twin of the evidence words
    followed = int(st[ep.closed] - st[ep.onset])
    if ep.status == "open" and ep.closed - ep.onset < cfg.for_interval(interval).spike.fast_points:
        evidence = f"The {metric} {what}; the log ends {followed} steps later, before it came back."
        return Incident(kind=K.SPIKE_NO_RECOVERY, metric=metric, onset=int(st[onset]), peak=int(st[ep.peak]),
                        end=None, baseline=ep.base, peak_value=ep.peak_value, magnitude=excess, magnitude_sigma=sigma,
                        streams=streams, severity=Severity.CRITICAL, evidence=evidence, details=details)
    if kept >= cfg.shift_ratio and not rising:
        kind = K.LEVEL_SHIFT
        evidence = (f"The {metric} {what} and stayed there: {followed} steps later it still sits "
                    f"{settled_excess:.3g} ({kept:.0%} of the jump) above its pre-event trend, which is flat.")
        sev = Severity.WARNING
    else:
        kind = K.SPIKE_NO_RECOVERY
        tail = "and is rising again (turning into divergence)" if rising else f"settling {settled_excess:.3g} higher"
        evidence = (f"The {metric} {what}, came partly back, but {followed} steps later it is still not "
                    f"on its pre-event trend, {tail}.")
        sev = Severity.CRITICAL
    return Incident(kind=kind, metric=metric, onset=int(st[onset]), peak=int(st[ep.peak]), end=None,
                    baseline=ep.base, peak_value=ep.peak_value, magnitude=excess, magnitude_sigma=sigma,
                    streams=streams, severity=sev, evidence=evidence, details=details)


def divergence_incident(ev: SeriesEvents, d: Divergence, metric: str, lag: int,
                        streams: list[str], shift_ratio: float = 0.75) -> Incident:
    """A sustained climb: divergence, or a level shift when a single step carries the rise (a spike
    without recovery when that step kept less than ``shift_ratio`` of its first points' excess)."""
    x, st = ev.values, ev.steps
    rise_total = max(float(ev.baseline[d.trigger] - d.minimum),
                     float(np.median(x[d.trigger:d.trigger + 5])) - d.minimum, 1e-12)
    h = 16
    lo, hi = max(0, d.minimum_at - lag), min(len(x), d.trigger + lag + h)
    step_up, at = 0.0, None
    if hi - lo > 2 * h:
        med = np.median(np.lib.stride_tricks.sliding_window_view(x[lo:hi], h), axis=1)
        jumps = med[h:] - med[:-h]
        j = int(np.argmax(jumps))
        step_up, at = float(jumps[j]), lo + j + h
    peak = d.trigger + int(np.argmax(x[d.trigger:])) if d.end is None else d.trigger
    sigma = rise_total / d.noise if d.noise > 0 else float("inf")
    details = {"minimum": d.minimum, "minimum_step": int(st[d.minimum_at]), "declared_at": int(st[d.trigger]),
               "threshold": d.threshold, "largest_step_up": step_up}
    flat_after = False
    if at is not None:
        after = x[at:min(len(x), at + 4 * h)]
        if len(after) >= 2 * h:  # a shift stays on its new level; a divergence keeps climbing
            flat_after = float(np.median(after[-h:]) - np.median(after[:h])) < 0.25 * step_up
    if at is not None and step_up >= 0.7 * rise_total and flat_after:
        onset = at
        while onset > lo and x[onset - 1] - d.minimum > 0.5 * step_up:
            onset -= 1
        # The medians of 16 points see the level the step settled on, not the step's first points: a
        # spike that fell part of the way back within a few points looks like a step to them. The same
        # rule as for a spike episode (:func:`spike_incident`): a level shift keeps ``shift_ratio`` of
        # its early excess, the largest of its first three points less what noise adds to a max of 3,
        # over the median of the h points before it (the level ``step_up`` is measured from).
        pre = float(np.median(x[max(0, onset - h):onset])) if onset > 0 else d.minimum
        early = float(np.max(x[onset:onset + 3])) - 0.846 * d.noise - pre
        kept = step_up / early if early > 0 else 1.0
        details["kept_fraction"] = kept
        if kept < shift_ratio:
            evidence = (f"The {metric} jumped {early:.3g} above its level {pre:.4g} at step {int(st[onset])}, "
                        f"came part of the way back, and settled {step_up:.3g} higher ({kept:.0%} of the jump): "
                        "it never returned to its pre-event level.")
            peak_i = onset + int(np.argmax(x[onset:onset + 3]))
            return Incident(kind=K.SPIKE_NO_RECOVERY, metric=metric, onset=int(st[onset]), peak=int(st[peak_i]),
                            end=None, baseline=pre, peak_value=float(x[peak_i]), magnitude=early,
                            magnitude_sigma=early / d.noise if d.noise > 0 else float("inf"), streams=streams,
                            severity=Severity.CRITICAL, evidence=evidence, details=details)
        evidence = (f"The {metric} stepped up by {step_up:.3g} around step {int(st[at])} and stayed on the new "
                    f"level: one step carries {step_up / rise_total:.0%} of the rise of its baseline.")
        return Incident(kind=K.LEVEL_SHIFT, metric=metric, onset=int(st[onset]), peak=int(st[at]),
                        end=None if d.end is None else int(st[d.end]), baseline=d.minimum, peak_value=float(x[at]),
                        magnitude=rise_total, magnitude_sigma=sigma, streams=streams, severity=Severity.WARNING,
                        evidence=evidence, details=details)
    onset = d.onset
    lo = max(0, d.minimum_at - max(d.trigger - d.minimum_at, 2 * lag))
    # Where the trend turned: segmented regression with a smooth bend (:func:`best_bend`), over as many
    # points before the baseline's minimum as after it, and at least a whole window (the baseline is
    # a trailing median: its minimum lags the curve's turn by up to a window), against log(step) (a
    # loss curve is close to linear in log(step) over that span).
    tt = st[lo:d.trigger + 1].astype(np.float64)
    k = best_bend(running_median(x[lo:d.trigger + 1]), np.log(np.maximum(tt, 1)))
    if k is not None:
        onset = lo + k
        details["knot_step"] = int(st[lo + k])
    evidence = (f"The {metric}'s robust baseline turned upward after its minimum {d.minimum:.4g} "
                f"(step {int(st[d.minimum_at])}) and rose {rise_total:.3g} ({sigma:.1f} sigma, "
                f"{rise_total / abs(d.minimum):.0%}) without a spike"
                + ("; it has not come back." if d.end is None else f"; it came back at step {int(st[d.end])}."))
    return Incident(kind=K.DIVERGENCE, metric=metric, onset=int(st[onset]), peak=int(st[peak]),
                    end=None if d.end is None else int(st[d.end]), baseline=d.minimum, peak_value=float(x[peak]),
                    magnitude=rise_total, magnitude_sigma=sigma, streams=streams,
                    severity=Severity.CRITICAL if d.end is None else Severity.WARNING, evidence=evidence,
                    details=details)


def running_median(y: np.ndarray, h: int = 9) -> np.ndarray:
    """Running median of ``h`` points (spikes must not pull the knot), same length as ``y``."""
    if len(y) < h:
        return y
    med = np.median(np.lib.stride_tricks.sliding_window_view(y, h), axis=1)
    return np.concatenate([np.full(h // 2, med[0]), med, np.full(len(y) - len(med) - h // 2, med[-1])])
