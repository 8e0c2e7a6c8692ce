"""The tests of one candidate plateau of :func:`lossguard.detect.stall.find_stalls`: the early
progress it fell behind (condition 2), and its sequel or cause (condition 3) with the LR's evidence."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .regime import D2_TO_SIGMA
from .robust import is_smoothed
from .stall_config import Stall, StallConfig


@dataclass(frozen=True)
class _Blocks:
    """A log cut into blocks: the block medians and what the tests read beside them."""

    s: np.ndarray
    """Steps of the finite loss points."""
    x0: float
    """The first finite loss of the log (its start, for the progress since then)."""
    med: np.ndarray
    """Block medians."""
    edges: np.ndarray
    """Index of each block's first point (and one past the last)."""
    centre: np.ndarray
    """Step at each block's middle."""
    se: float
    """Standard error of a block median."""
    need: int
    """Fewest blocks a plateau spans."""
    skip: int
    """The first blocks, which open no plateau."""


def _blocks(s: np.ndarray, x: np.ndarray, cfg: StallConfig) -> _Blocks:
    """Cut the finite loss points into ``cfg.blocks`` blocks of equal point count."""
    nb = min(cfg.blocks, len(x) // 3)
    edges = np.linspace(0, len(x), nb + 1).astype(int)
    med = np.array([np.median(x[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)])
    sigma = 1.4826 * np.median(np.abs(np.diff(x))) / np.sqrt(2.0)
    se = 1.25 * sigma / np.sqrt(len(x) / nb)
    if is_smoothed(x):
        # A running or moving mean (kohya's avr_loss) differs by a tiny amount from point to point but
        # wanders over hundreds of points: its block medians scatter far more than the point noise
        # predicts, and their own scatter (second differences: a trend cancels) is the standard error.
        se = max(se, D2_TO_SIGMA * float(np.median(np.abs(np.diff(med, 2)))))
    centre = np.array([s[(a + b - 1) // 2] for a, b in zip(edges[:-1], edges[1:], strict=True)])
    return _Blocks(s=s, x0=float(x[0]), med=med, edges=edges, centre=centre, se=float(se),
                   need=max(cfg.min_blocks, int(np.ceil(cfg.min_fraction * nb))),
                   skip=max(1, int(np.ceil(cfg.skip_fraction * nb))))


def _lr_rise(lr: tuple[np.ndarray, np.ndarray] | None, start: float, stop: float) -> float:
    """The largest factor by which the LR rose within ``[start, stop]`` (over its running minimum
    there); 1.0 without an LR. ``lr``, like every series here, comes finite and float64 from
    :func:`lossguard.detect.stall.find_stalls`."""
    if lr is None:
        return 1.0
    ls, lv = lr
    v = lv[(ls >= start) & (ls <= stop) & (lv > 0)]
    return float(np.max(v / np.minimum.accumulate(v))) if len(v) else 1.0


def _lr_rose(lr, start: float, stop: float, factor: float) -> bool:
    """The LR rose at least ``factor`` times over within ``[start, stop]``: a schedule's restart."""
    return _lr_rise(lr, start, stop) >= factor


def _trend(j: int, k: int, bl: _Blocks, tol: float, cfg: StallConfig,
           origin: tuple[float, float] | None) -> tuple[int, int, np.ndarray, float] | None:
    """The early progress before the plateau ``j..k``: ``(a, b, levels, rate)``, the decline per unit
    log(step) of ``levels`` from block ``a`` to block ``b`` (None: no stretch to read it from).
    With ``origin`` (the log's first step and loss), the rate is at least the average progress per
    unit log(step) since then."""
    med, centre, skip = bl.med, bl.centre, bl.skip
    # The early progress is read from the running minimum of the block medians (the best level
    # reached so far), up to block b where the best level before the plateau was reached: the
    # stretch right before a plateau may be a spike, not progress (issue 20, LR 1.0: best 3.42 by
    # step 40, a spike to 4.5 in the warm-up, then the plateau). Normally b is the plateau's start.
    # Only when the plateau comes back to that best level: one that sits far above it followed a
    # jump up (a level shift, a spike that never recovered), which other tests name.
    first = min(skip, cfg.trend_from_block)
    run_min = np.minimum.accumulate(med[:j + 1])
    b = first + int(np.argmin(med[first:j + 1]))
    if b < j and float(np.min(med[j:k + 1])) <= run_min[b] + tol:
        lvl = run_min
        # not block 0 (the initial loss) nor, when b is later, the first blocks: the first steps'
        # drop is far steeper than any later trend
        start = first if b <= skip else skip
    else:
        b, lvl, start = j, med, skip
    # The stretch before b, as long as the plateau.
    a = max(start, b - (k - j + 1))
    t0, t1, t2 = centre[a], centre[b], centre[k]
    recent = a < b and 0 < t0 < t1 < t2
    rate = float((lvl[a] - lvl[b]) / np.log(t1 / t0)) if recent else 0.0  # decline per unit log(step)
    if origin is None:
        return (a, b, lvl, rate) if recent else None
    # The average progress since the log's first point, when larger: a stall that sets in within
    # the first blocks (issue 20's harsh preset at LR 0.1: 5.5 -> 3.4 by step 8 of 600, then 3.4 ->
    # 3.15 to the end) has no recent progress to read, only that.
    t_o, x_o = max(origin[0], 1.0), origin[1]
    if 0 < t1 < t2 and t_o < t1 and x_o > lvl[b]:
        rate = max(rate, float((x_o - lvl[b]) / np.log(t1 / t_o)))
    return (a, b, lvl, rate) if rate > 0 else None


def _judge(j: int, k: int, bl: _Blocks, tol: float, lr, attn, cfg: StallConfig,
           origin: tuple[float, float] | None) -> Stall | None:
    """Conditions 2 and 3 for the plateau of blocks ``j..k`` (``origin``: see :func:`_trend`)."""
    med, centre, edges, s = bl.med, bl.centre, bl.edges, bl.s
    trend = _trend(j, k, bl, tol, cfg, origin)
    if trend is None:
        return None
    a, b, lvl, rate = trend
    t1, t2 = centre[b], centre[k]
    expected = lvl[b] - rate * np.log(t2 / t1)
    if med[j] - expected < cfg.gap_tol * tol:
        return None
    # Flat relative to that trend: the plateau's own decline (first third's median less the last
    # third's, robust to one noisy block) is a small part of what the trend promised.
    third = max(1, (k - j + 1) // 3)
    own = float(np.median(med[j:j + third]) - np.median(med[k + 1 - third:k + 1]))
    if own > cfg.flat_ratio * (med[j] - expected):
        return None
    level = float(np.median(med[j:k + 1]))
    st = Stall(onset=int(s[edges[j]]), end=int(s[edges[k + 1] - 1]), level=level, expected=float(expected),
               tol=float(tol), final_level=float(med[-1]), decline=own)
    # Resumed: within a stretch as long as the plateau, the loss falls gap_tol tolerances below it,
    # and faster than it fell over the plateau by resume_ratio (a decelerating healthy curve goes
    # on falling slowly after any "plateau"; a stalled one turns down again).
    span = med[k + 1:k + 1 + (k - j + 1)]
    drop_in = max(0.0, float(med[j] - med[k]))
    after = np.flatnonzero(span < level - cfg.gap_tol * tol)
    if len(after) and float(level - np.min(span)) >= cfg.resume_ratio * drop_in:
        st.resumed_at = int(centre[k + 1 + after[0]])
        if not _lr_rose(lr, st.onset, st.resumed_at, cfg.lr_rise_factor):
            st.reasons.append("resumed")
    if lr is not None:
        ls, lv = lr
        top = float(np.max(lv))
        # the plateau's first half (a plateau that never resumes runs on through the decay)
        half = st.onset + (st.end - st.onset) // 2
        inside = lv[(ls >= st.onset) & (ls <= half)]
        later = lv[ls > half]
        if len(inside) and top > 0:
            st.lr_ratio = float(np.median(inside)) / top
            decays = len(later) > 0 and float(np.min(later)) <= cfg.decay_fraction * top
            st.lr_at_peak = bool(st.lr_ratio >= cfg.peak_lr_fraction and decays)
            if st.lr_at_peak:
                st.reasons.append("lr_at_peak")
    if attn is not None:
        a_s, a_v = attn
        upto = a_v[a_s <= st.end]
        if len(upto):
            st.attn_max = float(np.max(upto))
            if st.attn_max > cfg.attn_logit_high:
                st.reasons.append("attn_logits")
    # The LR at its peak is evidence of the cause, not of a stall: a run that converged early to
    # its floor during the peak looks the same from the loss and the LR alone.
    return st if {"resumed", "attn_logits"} & set(st.reasons) else None
