"""The divergence pass: climbs of the robust baseline that no earlier event explains.

A divergence stands unless repeated data explains its rise, or a spike explains it (the climb is
the spike itself, or continues a spike that never came back, or follows a spike that came back only
part of the way: that spike "turned into divergence" and is one incident, the spike's). A spike
episode that rose gradually (less than half its early excess in a jump) is a divergence too: a
rising curve outran its trailing baseline (:func:`gradual_divergence`).
"""
from __future__ import annotations

import numpy as np

from ..detect.episode import Excursion
from ..detect.trend import Divergence
from .classifier import divergence_incident, expected_level
from .context import Context, overlap

GRADUAL_PRE_POINTS = 5
"""Points before an episode's onset whose median is the level it jumped from."""
GRADUAL_EARLY_POINTS = 3
"""Points from the onset whose median is the episode's early level."""
GRADUAL_JUMP_SHARE = 0.5
"""An episode whose jump at onset carries less than this share of its early excess rose gradually."""


def is_gradual(ctx: Context, ep: Excursion) -> bool:
    """True when less than half of an episode's early excess arrived in a jump at its onset, or when
    it keeps climbing at least as fast after its onset as up to it (an accelerating climb outruns its
    trailing baseline before any single step is large)."""
    x = ctx.ev.values
    if ep.onset < GRADUAL_PRE_POINTS:
        return False
    pre = float(np.median(x[ep.onset - GRADUAL_PRE_POINTS:ep.onset]))
    early = float(np.median(x[ep.onset:ep.onset + GRADUAL_EARLY_POINTS]))
    if early > ep.base and (early - pre) < GRADUAL_JUMP_SHARE * (early - ep.base):
        return True
    # An accelerating climb: over the next points it rises at least as much again as it had risen
    # from the level before it to its onset (a step settles, a spike comes down).
    e = GRADUAL_EARLY_POINTS
    if ep.onset + 2 * e > len(x):
        return False
    later = float(np.median(x[ep.onset + e:ep.onset + 2 * e]))
    return early > pre and later - early >= early - pre


def divergence_pass(ctx: Context) -> None:
    """Report the detector's divergences that stand; remember the spikes that turned into one."""
    ev, st, lag, k, claims = ctx.ev, ctx.st, ctx.lag, ctx.interval, ctx.claims
    budget = ctx.dcfg.spike.budget_points
    for d in ev.divergences:
        a, z = int(st[d.minimum_at]), int(st[d.trigger])
        if any(overlap(a, z, s0, s1 + lag * k) for s0, s1 in claims.quiet):
            continue  # repeated data explains the rise
        if any(e.onset <= d.trigger and overlap(a, z, int(st[e.onset]), int(st[e.closed]) + lag * k)
               for e in ev.spikes):
            continue  # the baseline climbed because of a spike
        if any(e.end is None and e.onset <= d.minimum_at <= e.closed + lag for e in ev.spikes):
            continue  # the climb continues an unrecovered spike: "turning into divergence"
        # A spike that came "back" but whose loss never returned to its pre-spike trend before this
        # climb began (the climb's minimum sits above the trend extrapolated past the spike) only
        # recovered part of the way, then turned into divergence: one incident, the spike's.
        before = [e for e in ev.spikes if e.end is not None and e.closed < d.minimum_at <= e.closed + budget
                  and d.minimum - float(expected_level(ev, e, int(st[d.minimum_at])))
                  > ctx.cfg.settled_rel * abs(e.base)]
        claims.standing.append(d)
        if before:
            claims.turned[id(before[-1])] = d
            continue
        ctx.incidents.append(divergence_incident(ev, d, ctx.metric, lag, ctx.streams, ctx.cfg.shift_ratio))


def gradual_divergence(ctx: Context, ep: Excursion) -> bool:
    """Report an unrecovered, gradually rising spike episode as the divergence it is.

    Returns True when the episode is accounted for (reported as a divergence, or part of an earlier
    spike's climb), False when it is a spike after all.
    """
    if ep.end is not None or not is_gradual(ctx, ep):
        return False
    ev, st, lag, k = ctx.ev, ctx.st, ctx.lag, ctx.interval
    lo = max(0, ep.onset - ctx.dcfg.spike.budget_points)
    b = ev.baseline[lo:ep.onset + 1]
    if not np.isfinite(b).any():
        return False
    low = lo + int(np.nanargmin(b))
    if any(e.onset < ep.onset and overlap(int(st[low]), int(st[ep.onset]), int(st[e.onset]),
                                          int(st[e.closed]) + lag * k) for e in ev.spikes):
        return True  # the climb continues an earlier spike (one that turned into divergence)
    mn, nz = float(ev.baseline[low]), float(ev.noise[low])
    trend = ctx.dcfg.trend
    th = max(trend.rise_z * nz, trend.rise_rel * abs(mn))
    close = np.flatnonzero(ev.baseline[low:ep.onset + 1] <= mn + trend.near_fraction * th)
    turn = low + int(close[-1])
    d = Divergence(turn, low, ep.onset, None, mn, nz, 0.0)
    ctx.claims.standing.append(d)
    ctx.incidents.append(divergence_incident(ev, d, ctx.metric, lag, ctx.streams, ctx.cfg.shift_ratio))
    ctx.claims.events.append((int(st[turn]), int(st[ep.closed])))
    return True
