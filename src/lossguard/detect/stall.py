"""Stalls: the loss stops improving far above where its own early progress was heading.

The instability Wortsman et al. 2023 ("Small-scale proxies for large-scale Transformer training
instabilities", section 3.1) reproduce at small scale: at a learning rate that is too high the
attention logits grow, the attention entropy collapses and the loss sits on a plateau for hundreds
of steps while the LR is at its peak, resuming (or not) only when the LR decays. No point is an
outlier and nothing rises, so the spike and divergence tests never fire (issue 20: 11 runs called
healthy, some stuck from step 100 and ending 50% above the best LR's loss).

A converged run also stops improving; what tells them apart (all must hold, vectorised over block
medians of the whole log):

1. **a plateau**: a stretch of at least ``min_fraction`` of the run (and ``min_blocks`` blocks)
   over which the loss improves by less than ``tol`` (a spike inside it does not end it, as long as
   the plateau's median stays level) (the larger of ``tol_sigma`` standard errors of
   a block median and ``tol_rel`` of the level; on a smoothed series, :func:`.robust.is_smoothed`,
   the standard error is at least the block medians' own scatter: its slow wander is no stall);
2. **after progress**: before it, the loss was falling at a rate (per unit of log(step)) that,
   carried on over the plateau, would have taken it at least ``gap_tol`` tolerances lower. The
   rate is read from the running minimum of the block medians up to the best level reached before
   the plateau, when the plateau comes back to that level: the stretch right before a plateau may
   be a spike, not progress (issue 20's LR 1.0 run: best 3.42 by step 40, a warm-up spike to 4.5,
   then 3.4-3.6 from step ~120 to ~345). Otherwise it is read from the stretch just before;
3. **and a sequel or a cause** -- one of: the loss **resumes** falling after the plateau (within a
   stretch as long as it, ``gap_tol`` tolerances below it and ``resume_ratio`` times as far as it
   fell over the plateau: a converged run has nowhere to go; not when the LR rose ``lr_rise_factor``
   times over before it, a warm restart's doing); or the attention logits logged beside
   it are beyond ``attn_logit_high`` (the cause, measured).

The LR is evidence of the cause and goes into the incident (``lr_at_peak``: the median LR of the
plateau's first half is at least ``peak_lr_fraction`` of the largest, and it falls below
``decay_fraction`` of it later), but it does not decide alone: a run that converged early to its
floor while the LR was at its peak looks, from the loss and the LR, like a stall that never
resumed. Such a plateau is named only with the attention logits in the log.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .regime import D2_TO_SIGMA
from .robust import is_smoothed


@dataclass(frozen=True, kw_only=True)
class StallConfig:
    """Thresholds of :func:`find_stalls`."""

    blocks: int = 40
    """The log is cut into this many blocks of equal point count; a block's median is one level."""
    min_points: int = 120
    """Logs with fewer finite loss points are not judged (too few for a level per block)."""
    min_fraction: float = 0.2
    """A plateau spans at least this fraction of the run. Issue 20: 500 of 1,200 steps (0.42) at LR
    0.1 and 1,000 of 1,200 at 0.3; a byte-level model's early unigram plateau lasts a few percent,
    and a healthy curve's slow stretches improve by more than ``tol`` well within 20% of the run."""
    min_blocks: int = 4
    """...and at least this many blocks."""
    skip_fraction: float = 0.05
    """The first blocks (this fraction of the run) open no plateau: the loss of the first steps
    is dominated by warm-up and initialisation."""
    tol_sigma: float = 3.0
    """Improvement tolerance in standard errors of a block median (``1.25 sigma / sqrt(block)``)."""
    tol_rel: float = 0.01
    """...and at least this fraction of the loss level (1%: below it a plateau is not worth naming)."""
    gap_tol: float = 3.0
    """The early trend must have gone, and a resumption must go, this many tolerances lower."""
    flat_ratio: float = 0.25
    """Over the plateau the loss falls by at most this fraction of what the early trend promised
    (a healthy curve that merely decelerates keeps a larger part of it)."""
    resume_ratio: float = 3.0
    """A resumption falls at least this many times as far as the plateau itself did, over a
    stretch as long as the plateau."""
    peak_lr_fraction: float = 0.8
    """The plateau is "at the peak LR" when the median LR of its first half is at least this
    fraction of the largest."""
    decay_fraction: float = 0.5
    """...and the LR falls below this fraction of the largest after that (the schedule decays)."""
    trend_from_block: int = 1
    """The early trend may be read from this block on when the best level before the plateau was
    reached within the first ``skip_fraction`` blocks (a plateau never opens there). Block 0 holds
    the initial loss, far above any trend. Issue 20's LR 1.0 run (benchmarks/natural_instability.py)
    reached its best level, 3.42, in block 2 of 40 (step 40 of 600), spiked, then sat at 3.4-3.6
    until the LR decayed: its only progress lies in blocks 1-2."""
    lr_rise_factor: float = 2.0
    """A resumption is the schedule's, not the end of a stall, when the LR rose at least this many
    times over (its running minimum) between the plateau's start and the resumption: a warm restart
    (SGDR) or a new warm-up. A stall resumes as the LR *decays*. Measured on the curve families
    (``benchmarks/stall_families.py --runs 60``): without this, 12 of 53 clean ``restarts-studentt``
    runs and 1 of 54 ``restarts-ar1-short`` were named, each a plateau in a cycle's trough (LR at
    10-17% of its peak) that "resumed" after the next restart; the LR there rises 20x (the cycle's
    floor to its peak), far beyond 2. With it: 0 on both, the other 7 families unchanged."""
    attn_logit_high: float = 100.0
    """An attention logit above this is evidence of logit growth. Issue 20: 28-59 at stable LRs,
    294-4.9e5 at unstable ones; Kimi K2 clips at 100."""


@dataclass
class Stall:
    """One plateau named a stall (indices into the finite points of the loss)."""

    onset: int
    """Step where the plateau begins."""
    end: int
    """Last step of the plateau."""
    level: float
    """Median loss over the plateau."""
    expected: float
    """Where the early trend was heading at ``end``."""
    tol: float
    """The improvement tolerance used."""
    resumed_at: int | None = None
    """Step where the loss fell clearly below the plateau again (None: it never did)."""
    final_level: float = float("nan")
    """Median loss of the last block."""
    lr_at_peak: bool | None = None
    """The LR was at its peak over the plateau and decays later (None: no LR in the log)."""
    lr_ratio: float = float("nan")
    """Median LR of the plateau's first half / largest LR."""
    attn_max: float = float("nan")
    """Largest attention logit logged up to the plateau's end (NaN: none logged)."""
    reasons: list[str] = field(default_factory=list)
    """What decided it (the third condition's tests that held)."""


def _blocks(x: np.ndarray, n_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """Block medians and the index of each block's last point."""
    edges = np.linspace(0, len(x), n_blocks + 1).astype(int)
    med = np.array([np.median(x[a:b]) for a, b in zip(edges[:-1], edges[1:], strict=True)])
    return med, edges


def find_stalls(steps: np.ndarray, loss: np.ndarray, *, lr: tuple[np.ndarray, np.ndarray] | None = None,
                attn: tuple[np.ndarray, np.ndarray] | None = None,
                cfg: StallConfig | None = None) -> list[Stall]:
    """Every stall of a loss series (see the module docstring for the rule).

    Args:
        steps, loss: the live loss points (non-finite ones are dropped).
        lr: optional ``(steps, values)`` of the learning rate.
        attn: optional ``(steps, values)`` of the largest attention logit.
        cfg: thresholds.
    """
    cfg = cfg or StallConfig()
    ok = np.isfinite(loss)
    s, x = np.asarray(steps, dtype=np.float64)[ok], np.asarray(loss, dtype=np.float64)[ok]
    if len(x) < cfg.min_points:
        return []
    nb = min(cfg.blocks, len(x) // 3)
    med, edges = _blocks(x, nb)
    size = len(x) / nb
    sigma = 1.4826 * np.median(np.abs(np.diff(x))) / np.sqrt(2.0)
    se = 1.25 * sigma / np.sqrt(size)
    if is_smoothed(x):
        # A running or moving mean (kohya's avr_loss) differs by a tiny amount from point to point but
        # wanders over hundreds of points: its block medians scatter far more than the point noise
        # predicts, and their own scatter (second differences: a trend cancels) is the standard error.
        se = max(se, D2_TO_SIGMA * float(np.median(np.abs(np.diff(med, 2)))))
    centre = np.array([s[(a + b - 1) // 2] for a, b in zip(edges[:-1], edges[1:], strict=True)])
    need = max(cfg.min_blocks, int(np.ceil(cfg.min_fraction * nb)))
    out: list[Stall] = []
    skip = max(1, int(np.ceil(cfg.skip_fraction * nb)))
    j = skip + 1
    while j < nb - need + 1:
        tol = max(cfg.tol_sigma * se, cfg.tol_rel * abs(med[j]))
        k = j
        # Not improving: no block below the start's level by more than tol. A block above it (a
        # spike inside the plateau) does not end it, as long as the plateau's median stays level.
        while k + 1 < nb and med[k + 1] >= med[j] - tol and np.median(med[j:k + 2]) <= med[j] + 2 * tol:
            k += 1
        while k > j and med[k] > med[j] + 2 * tol:  # ...but it ends on a level block, not on a spike
            k -= 1
        length = k - j + 1
        if length < need:
            j += 1
            continue
        stall = _judge(j, k, skip, med, centre, edges, s, tol, lr, attn, cfg)
        if stall is not None:
            out.append(stall)
            j = k + 1
        else:
            j += 1
    return out


def _lr_rise(lr: tuple[np.ndarray, np.ndarray] | None, start: float, stop: float) -> float:
    """The largest factor by which the LR rose within ``[start, stop]`` (over its running minimum
    there); 1.0 without an LR."""
    if lr is None:
        return 1.0
    ls, lv = np.asarray(lr[0], dtype=np.float64), np.asarray(lr[1], dtype=np.float64)
    v = lv[(ls >= start) & (ls <= stop) & np.isfinite(lv) & (lv > 0)]
    return float(np.max(v / np.minimum.accumulate(v))) if len(v) else 1.0


def _lr_rose(lr, start: float, stop: float, factor: float) -> bool:
    """The LR rose at least ``factor`` times over within ``[start, stop]``: a schedule's restart."""
    return _lr_rise(lr, start, stop) >= factor


def _judge(j, k, skip, med, centre, edges, s, tol, lr, attn, cfg: StallConfig) -> Stall | None:
    """Conditions 2 and 3 for the plateau of blocks ``j..k``."""
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
    if a >= b:
        return None
    t0, t1, t2 = centre[a], centre[b], centre[k]
    if not 0 < t0 < t1 < t2:
        return None
    rate = (lvl[a] - lvl[b]) / np.log(t1 / t0)  # decline per unit log(step)
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
               tol=float(tol), final_level=float(med[-1]))
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
    if lr is not None and len(lr[1]):
        ls, lv = np.asarray(lr[0], dtype=np.float64), np.asarray(lr[1], dtype=np.float64)
        fin = np.isfinite(lv)
        ls, lv = ls[fin], lv[fin]
        top = float(np.max(lv)) if len(lv) else float("nan")
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
    if attn is not None and len(attn[1]):
        a_s, a_v = np.asarray(attn[0], dtype=np.float64), np.asarray(attn[1], dtype=np.float64)
        upto = a_v[(a_s <= st.end) & np.isfinite(a_v)]
        if len(upto):
            st.attn_max = float(np.max(upto))
            if st.attn_max > cfg.attn_logit_high:
                st.reasons.append("attn_logits")
    # The LR at its peak is evidence of the cause, not of a stall: a run that converged early to
    # its floor during the peak looks the same from the loss and the LR alone.
    return st if {"resumed", "attn_logits"} & set(st.reasons) else None
