"""The thresholds of the stall rule and the stall it names (:mod:`lossguard.detect.stall`)."""
from __future__ import annotations

from dataclasses import dataclass, field


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
    attn_early_fraction: float = 0.2
    """A plateau that creeps (see :mod:`lossguard.detect.stall`) is read only when the attention logits
    passed ``attn_logit_high`` within this fraction of the log's steps, and its early progress is read
    from the log's first point only when it begins within it too. Issue 20: a largest attention logit
    above 100 by step 200 of 1,200 (0.17) flags every unstable LR and no stable one; a healthy curve's
    progress per unit log(step) since its start is dominated by its first steps, and a late stretch
    of it is flat against that. Measured (``benchmarks/stall_counter.py``, logits past the bar at
    30% / 50% of the run): with 1.0 here 16/20 and 0/20 healthy cosine curves and 20/20 and 20/20
    linear-cooldown curves are named; with 0.2, 0/20 and 0/20, 8/20 and 6/20 (the level reading's,
    as before this reading existed)."""
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
    decline: float = 0.0
    """How far the loss fell over the plateau (its first third's median less its last third's): a
    plateau that creeps falls by more than ``tol``, still a small part of what its trend promised."""
    lr_at_peak: bool | None = None
    """The LR was at its peak over the plateau and decays later (None: no LR in the log)."""
    lr_ratio: float = float("nan")
    """Median LR of the plateau's first half / largest LR."""
    attn_max: float = float("nan")
    """Largest attention logit logged up to the plateau's end (NaN: none logged)."""
    reasons: list[str] = field(default_factory=list)
    """What decided it (the third condition's tests that held)."""
