"""The loss passes after the divergences: spikes (and resume spikes among them), sudden drops, and
level shifts too small for the point test.

Each pass skips what an earlier pass claimed: a spike inside a divergence is part of it, a fall
right after a spike or a shift is the way back down (not a drop), a step in the window medians that
a spike, a divergence, repeated data or a resume explains is not a shift of its own.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .. import metrics as M
from ..detect.drop import drop_threshold, find_wide_drops, is_drop
from ..detect.outlier import refresh_counts
from ..detect.shift import find_shifts
from ..recovery.severity import Severity
from .classifier import spike_incident
from .drops import drop_incident, wide_drop_incident
from .context import Context, overlap
from .divergence import gradual_divergence
from .incident import Incident, IncidentKind as K

SHIFT_ONSET_LOOKBACK = 16
"""A level shift's onset is moved back at most this many points, while the values there already
carry more than half the jump."""
SHIFT_BOUNDARY_WINDOWS = 2
"""A step within this many resume windows (``resume.level_points``) after a resume belongs to it."""


def lr_peak(ctx: Context) -> int | None:
    """Finite index of the loss where the logged LR first reaches its peak (0 without a warm-up), or
    None when the log has no usable LR series."""
    if M.LR not in ctx.log.series:
        return None
    s, v = ctx.log.live(M.LR)
    ok = np.isfinite(v)
    if ok.sum() < 3:
        return None
    s, v = s[ok], v[ok]
    peak = int(np.argmax(v >= 0.999 * v.max()))
    return 0 if peak == 0 else int(np.searchsorted(ctx.st, s[peak]))


def _warmup_end(ctx: Context) -> int:
    """Last step of the LR warm-up (where the logged LR first peaks, plus one window), or, without an
    LR series, the step two windows into the run."""
    steps, window = ctx.st, ctx.dcfg.outlier.window
    if not len(steps):
        return 0
    peak = lr_peak(ctx)
    if peak is None:
        return ctx.step(2 * window)
    return ctx.step(peak + window)  # (no warm-up: one window into the run)


def spike_pass(ctx: Context) -> None:
    """Classify every upward episode of the loss not claimed by a divergence or by repeated data."""
    ev, st, claims = ctx.ev, ctx.st, ctx.claims
    for ep in ev.spikes:
        if claims.covers(int(st[ep.onset]), int(st[ep.onset]), events=False, quiet=False):
            continue  # the step back up from repeated data
        if ep.end is None and claims.diverging_at(ep.onset):
            continue
        if gradual_divergence(ctx, ep):
            continue
        inc = spike_incident(ev, ep, ctx.metric, ctx.cfg, ctx.interval, ctx.streams)
        d = claims.turned.get(id(ep))
        if d is not None:
            inc = replace(
                inc, kind=K.SPIKE_NO_RECOVERY, end=None, recovery_steps=None, severity=Severity.CRITICAL,
                evidence=(f"The {ctx.metric} rose {inc.magnitude:.3g} ({inc.magnitude_sigma:.1f} sigma) above its "
                          f"pre-event level {ep.base:.4g} at step {int(st[ep.peak])}, came back part of the way, but "
                          f"never to its pre-event trend: from step {int(st[d.minimum_at])} (at {d.minimum:.4g}) it "
                          "rose again and kept rising (turning into divergence)."),
                details={**inc.details, "turned_into_divergence_at": int(st[d.minimum_at])})
        if inc.kind in (K.LEVEL_SHIFT, K.SPIKE_NO_RECOVERY) and claims.diverging_at(ep.onset):
            continue  # "settled higher" than a trend that was already diverging: part of the divergence
        b = ctx.boundary_near(ep.onset, ctx.cfg.resume.spike_points)
        if b is not None and inc.end is not None:
            inc = replace(inc, kind=K.RESUME_SPIKE, severity=Severity.INFO,
                          evidence=inc.evidence + f" It began {int(st[ep.onset] - st[b])} steps after a resume at "
                                                  f"step {int(st[b])}.")
            claims.resumed.add(b)
        claims.events.append((int(st[ep.onset]), int(st[ep.closed])))
        ctx.incidents.append(inc)


def drop_pass(ctx: Context) -> None:
    """Sudden drops: steep, persistent falls after a slow stretch, past the LR warm-up."""
    ev, st, dcfg, claims = ctx.ev, ctx.st, ctx.dcfg, ctx.claims
    persist, w, k = dcfg.drop.persist_points, dcfg.outlier.window, ctx.interval
    warm_end = _warmup_end(ctx)
    for ep in ev.dips:
        if ctx.boundary_near(ep.onset, ctx.cfg.resume.level_points) is not None:
            continue  # a dip at a resume is repeated data, not a drop
        # Back "in band" because a spike lifted the loss there is not a recovery from the drop.
        lifted = ep.end is not None and ep.end - ep.onset >= persist and any(
            sp.onset <= ep.closed + dcfg.dip.settle and ep.end <= sp.closed for sp in ev.spikes)
        if not (is_drop(ep, dcfg.drop) or lifted) or int(st[ep.onset]) <= warm_end:
            continue  # a flat start then a steep fall is the LR warm-up, not grokking
        a = int(st[ep.onset])
        if any(overlap(a, a, s0, s1 + w * k) for s0, s1 in claims.events + claims.quiet):
            continue  # the way back down from a spike or shift, measured from a raised baseline
        inc = drop_incident(ev, ep, ctx.metric, dcfg.drop, ctx.streams, window=w)
        if not -inc.magnitude >= float(drop_threshold(dcfg.outlier, dcfg.drop, ep.base, ep.noise, False)):
            continue  # the level after the fall is not far enough below: one deep stretch, not a drop
        ctx.incidents.append(inc)
        # The new, lower level is the drop's: a window-median step just after it is its aftermath.
        claims.events.append((inc.onset, ctx.step(ep.closed)))
    _wide_drops(ctx, int(np.searchsorted(st, warm_end, side="right")))


WIDE_SCALES = (1, 2, 4)
"""Scales of the wide-drop test, in outlier windows: a fall over up to four windows is still sudden
against the three times longer slow stretch the test compares it with."""


def _wide_drops(ctx: Context, first: int) -> None:
    """Falls wider than the trailing window (:func:`lossguard.detect.drop.find_wide_drops`) that no
    other event explains."""
    ev, dcfg, claims = ctx.ev, ctx.dcfg, ctx.claims
    w, k = dcfg.outlier.window, ctx.interval
    if not np.isfinite(ev.noise).any():
        return
    noise = float(np.nanmedian(ev.noise))
    for d in find_wide_drops(ev.values, noise, dcfg.outlier, dcfg.drop, first=first,
                             scales=tuple(s * w for s in WIDE_SCALES)):
        a, z = ctx.step(d.at - d.scale), ctx.step(d.at + d.scale)
        if ctx.boundary_near(d.at + d.scale, 2 * d.scale) is not None:
            continue  # a dip at a resume is repeated data
        if any(overlap(a, z, s0, s1 + w * k) for s0, s1 in claims.events + claims.quiet) or any(
                i.kind is K.SUDDEN_DROP and overlap(a, z, i.onset, i.end or i.onset) for i in ctx.incidents):
            continue  # the way back down from a spike or shift, or a drop already found
        inc = wide_drop_incident(ev, d, ctx.metric, ctx.streams)
        ctx.incidents.append(inc)
        claims.events.append((inc.onset, inc.end if inc.end is not None else inc.peak))  # a drop has an end


def shift_pass(ctx: Context) -> None:
    """Level shifts too small for the point test: steps in the window medians that stay."""
    ev, st, dcfg, claims = ctx.ev, ctx.st, ctx.dcfg, ctx.claims
    w = dcfg.outlier.window
    refresh = refresh_counts(len(ev.values), dcfg.outlier)
    for sh in find_shifts(ev.values, ev.baseline, ev.noise, refresh, w, ctx.cfg.shift):
        a, z = ctx.step(sh.at - w), ctx.step(sh.at + w)
        if claims.covers(a, z) or any(overlap(a, z, int(st[d.minimum_at]), int(st[-1]) if d.end is None
                                              else int(st[d.end])) for d in claims.standing) \
                or ctx.boundary_near(sh.at, SHIFT_BOUNDARY_WINDOWS * ctx.cfg.resume.level_points) is not None:
            continue  # (a step right at a resume belongs to the resume; one a window later does not)
        onset = sh.at
        while (onset > 0 and ev.values[onset - 1] - sh.level_before > 0.5 * sh.jump
               and sh.at - onset < SHIFT_ONSET_LOOKBACK):
            onset -= 1
        ctx.incidents.append(Incident(
            kind=K.LEVEL_SHIFT, metric=ctx.metric, onset=int(st[onset]), peak=int(st[sh.at]), end=None,
            baseline=sh.level_before, peak_value=sh.level_before + sh.jump, magnitude=sh.jump,
            magnitude_sigma=sh.jump / sh.noise if sh.noise > 0 else float("inf"), streams=ctx.streams,
            severity=Severity.WARNING,
            evidence=(f"The {ctx.metric} stepped up by {sh.jump:.3g} ({sh.jump / abs(sh.level_before):.0%}) against "
                      f"its trend around step {int(st[sh.at])} and stayed there a window later: a new level, too "
                      "small for a spike, seen in the medians of whole windows."),
            details={"jump": sh.jump, "test": "window-median step"}))
        claims.events.append((int(st[onset]), int(st[sh.at])))
