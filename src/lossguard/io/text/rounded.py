"""A step counter printed with three significant digits, restored from an exact counter beside it.

tqdm prints a postfix number through ``format_num`` (``'{:.3g}'`` when that is shorter), so a float
step such as NeMo's ``global_step=10009.0`` is printed ``1e+4``: from step 10,000 several steps print
the same number and would collapse into one point. When the same line also prints an exact counter
(the bar's ``n``) that runs in lock-step with the step (a constant difference on every row printed
in full), a row whose step is a short number that the exact counter, less that difference, rounds
to is given that value instead. A row where the two disagree (a closing refresh that redraws the
last postfix at the same ``n``) keeps what it printed.
"""
from __future__ import annotations

import numpy as np

from .records import Table

MIN_ROUNDED = 1000
"""Below this a 3-significant-digit print is exact for a whole number."""
LOCKSTEP_SHARE = 0.9
"""The share of rows printed in full that must show the same difference to the exact counter."""
SAMPLE_ROWS = 10_000
"""Rows printed in full the difference is taken from (a 1M-line log needs no more to show lock-step)."""


def restore(t: Table, j: int) -> np.ndarray:
    """Column ``j`` (the step) of ``t``, its rounded prints restored from an exact counter of the row."""
    v = t.column(j)
    short = np.isfinite(v) & (np.abs(v) >= MIN_ROUNDED) & (_sig3(v) == v)
    full = np.isfinite(v) & ~short
    if not short.any() or full.sum() < 3:
        return v
    for k, kind in enumerate(t.kinds):
        n = t.column(k)
        if k == j or kind is None or not np.all(np.isfinite(n) & (n == np.round(n))):
            continue
        rows = np.flatnonzero(full)[:SAMPLE_ROWS]
        off, counts = np.unique(n[rows] - v[rows], return_counts=True)
        if counts.max() < LOCKSTEP_SHARE * len(rows):
            continue
        est = n - off[np.argmax(counts)]
        # a redraw at the same n (a closing refresh) has moved on without it: not in lock-step there
        fix = short & (_sig3(est) == v) & np.r_[True, n[1:] != n[:-1]]
        if fix.any():
            v = v.copy()
            v[fix] = est[fix]
        return v
    return v


def _sig3(v: np.ndarray) -> np.ndarray:
    """``v`` rounded to three significant digits, as ``'{:.3g}'`` prints it."""
    with np.errstate(all="ignore"):  # inf and nan give nan, never equal to anything
        mag = np.floor(np.log10(np.abs(np.where(v == 0, 1.0, v))))
        scale = 10.0 ** (mag - 2)
        return np.round(v / scale) * scale
