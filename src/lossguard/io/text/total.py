"""A loss printed as its parts and their total, none of them named a loss.

Detection and segmentation trainers print each part of the loss beside their sum under letters or
names that no loss list can know (``B: 3.451 | C: 2.964 | M: 4.671 | S: 0.945 | T: 12.031``). The
sum itself says which column is the loss: :func:`total_column` finds a column that equals the sum of
at least two others on every row, within what printing rounds away. The choice is announced like
every guess (:mod:`.choose`).
"""
from __future__ import annotations

from itertools import combinations

import numpy as np

from .records import Table

MIN_PARTS = 2
"""A total sums at least this many columns."""
MAX_COLUMNS = 10
"""Subsets of more value columns than this are not searched (2^10 sums of a few rows)."""
REL_TOLERANCE = 1e-6
"""Float error allowed beyond the printing's rounding (relative to the total)."""
PROBE_ROWS = 8
"""Rows a subset is tried on before it is checked on every row."""


def total_column(t: Table, columns: list[int]) -> int | None:
    """The one column among ``columns`` (value columns of ``t``) equal on every row to the sum of at
    least :data:`MIN_PARTS` others, or None (none, or several)."""
    if len(columns) < MIN_PARTS + 1 or len(columns) > MAX_COLUMNS or t.rows < 2:
        return None
    data = np.column_stack([t.column(j) for j in columns])
    if not np.all(np.isfinite(data)) or np.any(data < 0):
        return None  # parts of a loss are finite and not negative
    probe = data[:PROBE_ROWS]
    step = np.array([_resolution(data[:, k]) for k in range(len(columns))])
    fine = step[step < 1]
    # A column of whole values ("2.000") hides its printed digits: take the finest of the others.
    step = np.where(step >= 1, float(fine.min()) if len(fine) else 1.0, step)
    found = set()
    for c in range(len(columns)):
        rest = [k for k in range(len(columns)) if k != c]
        for size in range(MIN_PARTS, len(rest) + 1):
            for parts in combinations(rest, size):
                # each printed number is off by up to half its last digit: the parts' and the total's
                tol = 0.5 * (step[list(parts)].sum() + step[c]) + REL_TOLERANCE * np.abs(data[:, c])
                if np.all(np.abs(probe[:, list(parts)].sum(axis=1) - probe[:, c]) <= tol[:PROBE_ROWS]) \
                        and np.all(np.abs(data[:, list(parts)].sum(axis=1) - data[:, c]) <= tol):
                    found.add(columns[c])
    return found.pop() if len(found) == 1 else None


def _resolution(v: np.ndarray) -> float:
    """The last printed digit of a column (``1e-3`` for ``3.451``): the coarsest 10^-d that every
    value is a whole multiple of, for d up to 8."""
    for d in range(9):
        scaled = v * 10.0 ** d
        if np.all(np.abs(scaled - np.round(scaled)) <= 1e-6 * np.maximum(1.0, np.abs(scaled))):
            return 10.0 ** -d
    return 1e-8
