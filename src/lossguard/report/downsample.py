"""Downsampling for drawing that never loses a spike.

A million-step curve drawn on a 1,500-pixel chart puts hundreds of points in every pixel column; a
browser asked to draw them all is slow, and a naive "every k-th point" thinning silently drops the
one-step spikes that the report exists to show. We use the M4 scheme (Jugel et al., "M4: A
Visualization-Oriented Time Series Data Aggregation", VLDB 2014): split the step axis into equal-width
buckets and keep, per bucket, the first, the last, the lowest and the highest point. Drawn as a line,
that is pixel-identical to the full curve when there are at least as many buckets as pixel columns,
and every extreme point survives with its true step and value.

On top of M4 we always keep:

* every point whose step is in ``keep_steps`` (incident onsets, peaks and ends);
* every point inside ``keep_ranges`` (windows around incidents, so zooming into one shows the real
  curve, not its buckets);
* isolated one-step spikes, even when two share a bucket (:func:`isolated_spikes`);
* non-finite points (NaN/Inf): the first and the last in every bucket, so a chart can mark where the
  run produced NaN even when the line cannot be drawn there.

Everything is vectorised numpy; 1,000,000 points take a few tens of milliseconds.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from ..detect.outlier import DIFF_TO_SIGMA
from ..errors import ConfigError


def _first_per_group(positions: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The first element of ``positions`` in each run of equal ``groups`` (both same length, sorted)."""
    if not len(positions):
        return positions
    head = np.ones(len(groups), dtype=bool)
    head[1:] = groups[1:] != groups[:-1]
    return positions[head]


def _last_per_group(positions: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The last element of ``positions`` in each run of equal ``groups``."""
    if not len(positions):
        return positions
    tail = np.ones(len(groups), dtype=bool)
    tail[:-1] = groups[1:] != groups[:-1]
    return positions[tail]


def bucket_extremes(values: np.ndarray, bucket: np.ndarray) -> np.ndarray:
    """Indices of the first, last, minimum and maximum point of every bucket (the M4 points).

    Args:
        values: float64 values, all finite.
        bucket: the bucket number of each value, non-decreasing (buckets are contiguous).

    Returns:
        Sorted unique int64 indices into ``values``. Ties for the minimum or maximum keep the first.
    """
    n = len(values)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    ends = np.r_[starts[1:], n] - 1
    counts = ends - starts + 1
    lows = np.repeat(np.minimum.reduceat(values, starts), counts)
    highs = np.repeat(np.maximum.reduceat(values, starts), counts)
    idx = np.arange(n, dtype=np.int64)
    is_low = values == lows
    is_high = values == highs
    argmin = _first_per_group(idx[is_low], bucket[is_low])
    argmax = _first_per_group(idx[is_high], bucket[is_high])
    return np.unique(np.concatenate([starts, ends, argmin, argmax]).astype(np.int64))


def isolated_spikes(values: np.ndarray, *, z: float = 6.0, limit: int | None = None) -> np.ndarray:
    """Indices of points that stand out from both neighbours by more than ``z`` noise units.

    M4 keeps only the highest point of a bucket; when two one-step spikes share a bucket (two data
    outliers 100 steps apart in a million-step run), the smaller one would vanish from a zoomed-in
    view. This O(n) test keeps them: a point's prominence is how far it sticks out above (or below)
    the nearer of its two neighbours; the noise is the robust sigma of first differences
    (``1.4826 / sqrt(2) * median |x[t] - x[t-1]|``) over the whole curve.

    Args:
        values: finite float64 values in step order.
        z: prominence threshold in noise units.
        limit: keep at most this many, the most prominent first (None: all).

    Returns:
        Sorted int64 indices into ``values``.
    """
    if len(values) < 3:
        return np.empty(0, dtype=np.int64)
    d = np.diff(values)
    sigma = DIFF_TO_SIGMA * float(np.median(np.abs(d)))
    if sigma <= 0:  # a flat curve with steps: every change is a spike of infinite z; M4 keeps those
        return np.empty(0, dtype=np.int64)
    mid, left, right = values[1:-1], values[:-2], values[2:]
    prominence = np.maximum(mid - np.maximum(left, right), np.minimum(left, right) - mid) / sigma
    idx = np.flatnonzero(prominence > z)
    if limit is not None and len(idx) > limit:
        idx = np.sort(idx[np.argsort(prominence[idx])[::-1][:limit]])
    return (idx + 1).astype(np.int64)


def downsample(steps: np.ndarray, values: np.ndarray, *, buckets: int = 2000,
               keep_steps: Iterable[int] = (), keep_ranges: Iterable[tuple[int, int]] = (),
               spike_z: float | None = 6.0) -> np.ndarray:
    """Choose the points of one curve to draw.

    Args:
        steps: int64 steps, sorted ascending (a live timeline, or one segment's points).
        values: float64 values of the same length; NaN and Inf are allowed.
        buckets: number of equal-width step buckets; 4 points are kept per bucket (plus spikes). Use at
            least the chart's width in pixels for a drawing identical to the full curve.
        keep_steps: steps whose points must be kept (e.g. an incident's onset and peak).
        keep_ranges: inclusive ``(first, last)`` step ranges kept whole.
        spike_z: also keep every point that sticks out of both neighbours by this many noise
            units (:func:`isolated_spikes`), at most ``buckets`` of them; None to turn off.

    Returns:
        Sorted unique int64 indices into ``steps``/``values``. When the curve has no more than
        ``4 * buckets`` points, all of them.

    Raises:
        ConfigError: ``buckets`` below 1, or ``steps`` and ``values`` of different lengths.
    """
    if buckets < 1:
        raise ConfigError(f"buckets must be at least 1, got {buckets}", where="field 'buckets'",
                          fix="pass the chart width in pixels, e.g. buckets=2000")
    steps = np.asarray(steps, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    if steps.shape != values.shape:
        raise ConfigError(f"{len(steps)} steps but {len(values)} values", where="argument 'values'",
                          fix="pass one value per step")
    n = len(steps)
    if n <= 4 * buckets:
        return np.arange(n, dtype=np.int64)

    # Equal-width buckets in step units, so irregular logging intervals do not distort the x axis.
    first, span = int(steps[0]), int(steps[-1]) - int(steps[0]) + 1
    bucket = ((steps - first) * buckets) // span

    finite = np.isfinite(values)
    parts = []
    where_finite = np.flatnonzero(finite)
    fvalues = values if len(where_finite) == n else values[where_finite]
    parts.append(where_finite[bucket_extremes(fvalues, bucket[where_finite])])
    if spike_z is not None:
        parts.append(where_finite[isolated_spikes(fvalues, z=spike_z, limit=buckets)])
    if len(where_finite) < n:
        where_bad = np.flatnonzero(~finite)
        parts.append(_first_per_group(where_bad, bucket[where_bad]))
        parts.append(_last_per_group(where_bad, bucket[where_bad]))

    wanted = np.asarray(sorted(set(int(s) for s in keep_steps)), dtype=np.int64)
    if len(wanted):
        pos = np.searchsorted(steps, wanted)
        pos = pos[pos < n]
        parts.append(pos[np.isin(steps[pos], wanted)])  # only steps that exist in this curve
    for lo, hi in keep_ranges:
        a, b = int(np.searchsorted(steps, lo, side="left")), int(np.searchsorted(steps, hi, side="right"))
        if b > a:
            parts.append(np.arange(a, b, dtype=np.int64))
    return np.unique(np.concatenate(parts))
