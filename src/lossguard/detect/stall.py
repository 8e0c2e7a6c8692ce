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

**A plateau that creeps** (issue 20's harsh preset at LR 0.1, + guard: 3.34 -> 3.13 over steps 80-599
at the peak LR, against ~2.0 at the best LR) improves by more than ``tol`` and was cut by the level
test above into pieces each shorter than ``min_fraction``. "Stopped improving" is then read as a
rate, in a second reading that runs only when the largest attention logit passed
``attn_logit_high`` from below within the first ``attn_early_fraction`` of the log (the issue's
precursor: above 100 by step 200 of 1,200 flags every unstable LR and no stable one). It grows the
plateau, from after that step, along a line that may fall at ``flat_ratio`` of the early trend's
rate per unit log(step), ending where a block falls ``tol`` below the plateau's recent level (a
resumption); when the plateau begins within that early stretch, the early trend is at least the
average progress per unit log(step) since the log's first point (such a stall sets in within the
warm-up: 5.5 -> 3.4 by step 8 of 600, then 3.4 -> 3.15). It names the longest such stretch that
meets condition 2 **with the attention logits as the cause and the LR at its peak**; a resumption
alone does not decide there, because a healthy curve that decelerates and then falls faster as the
LR decays (a cosine tail, a linear cooldown) is, from the loss and the LR, a creep followed by a
"resumption". A creeping stall replaces the level ones it contains; one that overlaps a level one
only in part is left out.

The price, measured (``benchmarks/stall_counter.py``): from the loss alone such a creep is not told
from a healthy curve's deceleration (progress per log(step) after the logits passed 100 over before
it: 0.14-0.19 on the harsh 1e-1 runs, 0.09-2.6 on the real logs), so a healthy curve whose logits
pass ``attn_logit_high`` early is named too (20 of 20 synthetic cosine and cooldown curves); with
the logits below it, or passing it later, nothing changes.
"""
from __future__ import annotations

import numpy as np

from .stall_config import Stall, StallConfig
from .stall_judge import _blocks, _Blocks, _judge, _trend

__all__ = ["Stall", "StallConfig", "find_stalls"]


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
    s, x = _finite(steps, loss)
    if len(x) < cfg.min_points:
        return []
    lr, attn = _finite_or_none(lr), _finite_or_none(attn)
    bl = _blocks(s, x, cfg)
    out = _scan(bl, lr, attn, cfg)
    early = float(s[0] + cfg.attn_early_fraction * (s[-1] - s[0]))
    grew = _logits_grew(attn, cfg.attn_logit_high)
    if grew is not None and grew <= early:
        # With the cause measured, a plateau that creeps is named too: where no level one was, or in
        # place of the level ones it contains (a level stretch inside a creep is a piece of it).
        for c in _scan(bl, lr, attn, cfg, creep_from=grew, early=early):
            near = [o for o in out if c.onset <= o.end and o.onset <= c.end]
            if all(c.onset <= o.onset and o.end <= c.end for o in near):
                out = [o for o in out if o not in near] + [c]
        out.sort(key=lambda st: st.onset)
    return out


def _finite(steps, values) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, values)`` as float64 arrays, the points with a non-finite value dropped."""
    v = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(v)
    return np.asarray(steps, dtype=np.float64)[ok], v[ok]


def _finite_or_none(series: tuple[np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, np.ndarray] | None:
    """An optional ``(steps, values)`` series through :func:`_finite` once, here, so that the rules
    below read it as it is (None when absent or without a finite point)."""
    if series is None:
        return None
    out = _finite(*series)
    return out if len(out[1]) else None


def _logits_grew(attn: tuple[np.ndarray, np.ndarray] | None, high: float) -> float | None:
    """The first step where the largest attention logit (finite float64, :func:`_finite_or_none`)
    passed ``high`` after being logged below it
    (None: never, or above it from the log's first value: large logits, not their growth, which is
    Wortsman et al.'s precursor)."""
    if attn is None:
        return None
    a_s, a_v = attn
    above = np.flatnonzero(a_v > high)
    return float(a_s[above[0]]) if len(above) and above[0] > 0 else None


def _scan(bl: _Blocks, lr, attn, cfg: StallConfig, *, creep_from: float | None = None,
          early: float = 0.0) -> list[Stall]:
    """The stalls of one reading: level plateaus (``creep_from`` None) or creeping ones that begin
    after step ``creep_from``, where the attention logits passed ``attn_logit_high`` (the cause comes
    first), named only with those logits as the cause and the LR at its peak; their early progress is
    read from the log's first point too when they begin by step ``early``."""
    med, centre, nb = bl.med, bl.centre, len(bl.med)
    creep = creep_from is not None
    out: list[Stall] = []
    j = bl.skip + 1
    while j < nb - bl.need + 1:
        tol = max(cfg.tol_sigma * bl.se, cfg.tol_rel * abs(med[j]))
        slope, origin = 0.0, None
        if creep:
            origin = (float(bl.s[0]), bl.x0) if bl.s[bl.edges[j]] <= early else None
            # a plateau starts at the best level reached so far (not on a spike above it), and
            # after the logits grew
            if med[j] > float(np.min(med[1:j])) + 2 * tol or bl.s[bl.edges[j + 1] - 1] < creep_from:
                j += 1
                continue
            trend = _trend(j, min(nb - 1, j + bl.need - 1), bl, tol, cfg, origin)
            slope = cfg.flat_ratio * trend[3] if trend is not None else 0.0
        k = _grow(med, centre, j, tol, slope)
        # A level plateau is the grown stretch. A creeping one is the longest named stretch within
        # it: the creep allowance lets the growth run on into a resumption.
        ends = range(k, j + bl.need - 2, -1) if creep else ([k] if k - j + 1 >= bl.need else [])
        stall = None
        for end in ends:
            stall = _judge(j, end, bl, tol, lr, attn, cfg, origin)
            if stall is not None and creep and not {"attn_logits", "lr_at_peak"} <= set(stall.reasons):
                stall = None
            if stall is not None:
                k = end
                break
        if stall is not None:
            out.append(stall)
            j = k + 1
        else:
            j += 1
    return out


def _grow(med: np.ndarray, centre: np.ndarray, j: int, tol: float, slope: float) -> int:
    """The last block of the plateau that starts at block ``j``: every block stays within ``tol`` of
    the line it may creep along (``slope`` per unit log(step), 0: level), both from the plateau's
    start and from its recent level (the lowest of its last three blocks: a burst of hard batches
    raises a block, never lowers one; a resumption falls below it at once, long before it falls
    below the line drawn from the start). A block above it (a spike inside the plateau) does not
    end it, as long as the plateau's median stays level."""
    k = j
    while (k + 1 < len(med) and med[k + 1] >= med[j] - tol - slope * np.log(centre[k + 1] / centre[j])
           and (slope == 0 or med[k + 1] >= float(np.min(med[max(j, k - 2):k + 1])) - tol
                - slope * np.log(centre[k + 1] / centre[max(j, k - 1)]))
           and np.median(med[j:k + 2]) <= med[j] + 2 * tol):
        k += 1
    while k > j and med[k] > med[j] + 2 * tol:  # ...but it ends on a level block, not on a spike
        k -= 1
    return k
