"""What a short log's own noise allows: when one jump in a handful of points is an event.

The relative rules of :mod:`.short` judge a log of 3-31 points by distance alone (24% above the
level before), because a noise estimate from a few differences is too rough to set a threshold.
It is not too rough to *veto* one. A per-sample loss (llama.cpp's finetune prints one per
iteration) swings 2.1 -> 7.7 -> 2.1 -> 8.7 -> 2.5 -> 5.0 between points: every rise clears 24%, and
the highest is no event, only the largest of the log's usual swings. So a jump also has to clear the
log's own rises: :func:`within_swing` is true when the rise is less than :data:`SWING_Z` times the
typical upward step elsewhere in the log (the median of the other rises, as a noise sigma).

Only rises are counted: a loss that is still falling steeply (the first steps of a run) makes large
*downward* steps and few, small upward ones, so a real spike there keeps its distance from them.
A log with fewer than :data:`MIN_RISES` other rises gives no evidence and vetoes nothing.
"""
from __future__ import annotations

import numpy as np

from ..detect.robust import DIFF_TO_SIGMA

SUSTAINED_POINTS = 4
"""Points after a jump that must all stay up for one point before it to count as the level (a
paste that starts just before the jump: ``1.70, 11.46, 11.46, 11.47, ...``)."""
STILL_HIGH = 0.5
"""A climb still counts when the last point keeps at least this share of its rise."""
SWING_Z = 3.5
"""A short-log jump must rise at least this many noise sigmas (from the log's other rises) above
the lowest point before it: half the point test's ``z_threshold`` (7), because a sigma from a few
rises is rough and this only vetoes. The llama.cpp paste (issue 7611, 9 points) rises 2.4 sigma
of its own swings; the short-log test spikes rise 10 sigma and more."""
MIN_RISES = 2
"""Fewer other rises than this give no estimate of the log's swing (a falling log with one blip)."""


def sustained(x: np.ndarray, s: int, level: float, rise: float) -> bool:
    """True when at least :data:`SUSTAINED_POINTS` points from ``s`` on all keep at least
    :data:`STILL_HIGH` of the ``rise`` above ``level``, and the rise is at least the level itself
    (a doubling: one point is a rough level, so only a jump far above any noise of it counts)."""
    after = x[s:]
    return (len(after) >= SUSTAINED_POINTS and rise >= abs(level)
            and bool(np.all(after >= level + STILL_HIGH * rise)))


def within_swing(x: np.ndarray, low: int, peak: int) -> bool:
    """True when the rise from index ``low`` to index ``peak`` is no more than the log's own upward
    swings: less than :data:`SWING_Z` sigmas of the other rises (the upward steps of ``x`` outside
    the stretch from ``low`` to ``peak``, and those inside it that fell back before the peak)."""
    d = np.diff(x)
    # Rises inside the stretch that fell back before the peak are swings too (a noisy GAN loss goes
    # 0.04 -> 0.27 -> 0.13 -> 0.46): only a rise that the loss kept on its way up belongs to the event.
    inside = [d[j] for j in range(low, peak - 1) if d[j] > 0 and float(np.min(x[j + 2:peak + 1])) < x[j + 1]]
    others = np.concatenate([d[:low], d[peak:], np.asarray(inside, dtype=float)])
    rises = others[others > 0]
    if len(rises) < MIN_RISES:
        return False
    return bool(x[peak] - x[low] < SWING_Z * DIFF_TO_SIGMA * float(np.median(rises)))
