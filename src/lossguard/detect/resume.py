"""Resume artefacts: a spike right after a resume, and repeated data after a resume or rollback.

These tests look only where a resume happened (a segment boundary of the stitched run), so they can
afford lower thresholds than the everywhere-tests of :mod:`.outlier`: a 5% bump or a 3% dip is
noise anywhere in a run, but not in the first points after a restart.

* **Resume spike**: the highest of the first ``spike_points`` points after the boundary is above the
  pre-boundary level by ``spike_z`` noise units and ``spike_rel``; it ends when ``settle`` points in a
  row are back within the band.
* **Repeated data**: the data stream restarted from an earlier position, so the model reports a
  memorised, too-low loss until fresh data arrives. Three kinds of evidence: (1) the median of the
  first ``level_points`` points after the boundary is below the pre-boundary trend (extrapolated
  from two medians before the boundary) by ``dip_z`` standard errors and ``dip_rel``; (2) after a
  rollback, the live loss is below the superseded first pass at the same steps; (3) sample-id or
  batch-hash columns repeat. The end is where the loss first steps back up (the steepest point of the
  first rise of at least 3/4 of the dip between two adjacent medians), when it does.

These are offline tests: the guard knows its own resumes and does not need them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import raise_all
from ..runlog import RunLog
from .robust import MAD_TO_SIGMA

SAMPLE_ID_NAMES = ("sample_id", "first_sample_id", "batch_hash", "data_hash", "batch_id", "sample_hash")
"""Metric names that identify the data a step saw (a repeat means repeated data)."""


@dataclass(kw_only=True)
class ResumeConfig:
    """Thresholds of the boundary tests."""

    spike_points: int = 3
    """A resume spike starts within this many points after the boundary."""
    spike_z: float = 5.0
    """Excess over the pre-boundary level, in noise units..."""
    spike_rel: float = 0.03
    """...and relative to it."""
    level_points: int = 16
    """Points on each side of the boundary whose medians are compared."""
    dip_z: float = 4.5
    """Dip below the extrapolated trend, in standard errors of the difference of two medians..."""
    dip_rel: float = 0.015
    """...and relative to the level."""
    settle: int = 3
    """Consecutive in-band points that end a resume spike."""
    max_points: int = 3000
    """Longest stretch of repeated data searched for its end, in points."""

    def __post_init__(self) -> None:
        problems = [f"{name} must be > 0, got {getattr(self, name)}"
                    for name in ("spike_points", "spike_z", "level_points", "dip_z", "settle", "max_points")
                    if not getattr(self, name) > 0]
        problems += [f"{name} must be >= 0, got {getattr(self, name)}"
                     for name in ("spike_rel", "dip_rel") if not getattr(self, name) >= 0]
        raise_all(problems)


@dataclass
class BoundaryFinding:
    """What the boundary tests found at one resume, in indices of the finite live series.

    Attributes:
        kind: ``"resume_spike"`` or ``"repeated_data"``.
        segment: index of the segment that starts at the boundary.
        boundary: index of its first live point.
        onset, peak: indices of the start and of the largest excursion.
        end: index where the loss is back (spike) or stepped back up (repeated data), or None.
        level: pre-boundary level the excursion is measured from.
        excess: signed excursion at the peak (loss units).
        noise: robust per-point sigma before the boundary.
        evidence: the tests that fired, in words.
        details: the numbers behind them.
    """

    kind: str
    segment: int
    boundary: int
    onset: int
    peak: int
    end: int | None
    level: float
    excess: float
    noise: float
    evidence: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)


def boundary_indices(log: RunLog, steps: np.ndarray) -> list[tuple[int, int, str]]:
    """(segment, index of its first live point in ``steps``, kind) for every resume / rollback."""
    out: list[tuple[int, int, str]] = []
    for g in log.segments[1:]:
        i = int(np.searchsorted(steps, g.first_step))
        if 0 < i < len(steps) and (not out or out[-1][1] != i):
            out.append((g.index, i, g.kind))
    return out


def _pre_stats(x: np.ndarray, b: int, h: int) -> tuple[float, float, float]:
    """Level just before b, its decline per point, and the robust per-point sigma."""
    pre = x[max(0, b - h):b]
    level = float(np.median(pre))
    far = x[max(0, b - 3 * h):max(0, b - 2 * h)]
    slope = (float(np.median(far)) - level) / (2 * h) if len(far) >= h // 2 else 0.0
    wide = x[max(0, b - 4 * h):b]
    noise = MAD_TO_SIGMA * float(np.median(np.abs(wide - np.median(wide))))
    return level, max(slope, 0.0), max(noise, 1e-3 * abs(level))


def resume_spike(x: np.ndarray, b: int, seg: int, cfg: ResumeConfig) -> BoundaryFinding | None:
    """The resume-spike test at boundary index ``b`` of finite values ``x``."""
    h = cfg.level_points
    if b < h // 2:
        return None
    level, _, noise = _pre_stats(x, b, h)
    head = x[b:b + cfg.spike_points]
    if not len(head):
        return None
    p = b + int(np.argmax(head))
    excess = float(x[p] - level)
    if excess < cfg.spike_z * noise or excess < cfg.spike_rel * abs(level) or abs(level) < noise:
        return None
    band = max(2.0 * noise, 0.01 * abs(level))
    inband = (x[p + 1:p + 1 + cfg.max_points] - level) <= band
    run = np.convolve(inband.astype(np.int32), np.ones(cfg.settle, dtype=np.int32), "valid")
    hits = np.flatnonzero(run == cfg.settle)
    end = p + 1 + int(hits[0]) if len(hits) else None
    return BoundaryFinding("resume_spike", seg, b, b, p, end, level, excess, noise,
                           [f"{excess / noise:.1f} sigma ({100 * excess / abs(level):.1f}%) above the "
                            f"pre-resume level within {cfg.spike_points} points of the resume"],
                           {"excess_sigma": excess / noise})


def repeated_after(x: np.ndarray, b: int, seg: int, cfg: ResumeConfig) -> BoundaryFinding | None:
    """The level test for repeated data at boundary index ``b``: a dip below the extrapolated trend."""
    h = cfg.level_points
    if b < 2 * h or b + h > len(x):
        return None
    level, slope, noise = _pre_stats(x, b, h)
    expected = level - slope * h            # both medians sit ~h/2 points from the boundary
    post = float(np.median(x[b:b + h]))
    se = 1.2533 * noise * np.sqrt(2.0 / h)  # sd of a difference of two medians of h points
    dip = expected - post
    if dip < cfg.dip_z * se or dip < cfg.dip_rel * abs(level) or abs(level) < noise:
        return None
    # End: the largest step up between adjacent h-point medians after the boundary.
    seg_x = x[b:min(len(x), b + cfg.max_points)]
    end = None
    if len(seg_x) >= 2 * h + 1:
        med = np.median(np.lib.stride_tricks.sliding_window_view(seg_x, h), axis=1)
        rise = med[h:] - med[:-h]           # median of [j, j+h) minus median of [j-h, j)
        up = np.flatnonzero(rise >= 0.75 * dip)
        if len(up):                         # the first clear step up, at its steepest
            j = int(up[0])
            stop = j
            while stop + 1 < len(rise) and rise[stop + 1] >= 0.75 * dip:
                stop += 1
            j += int(np.argmax(rise[j:stop + 1]))
            end = b + j + h
    peak = b + int(np.argmin(x[b:b + h]))
    return BoundaryFinding("repeated_data", seg, b, b, peak, end, expected, -dip, noise,
                           [f"the loss after the resume is {100 * dip / abs(level):.1f}% "
                            f"({dip / se:.1f} standard errors) below the trend before it"
                            + (f", then steps back up {end - b} points after it" if end is not None else "")],
                           {"dip": dip, "dip_se": dip / se, "stepped_back_up": end is not None})


def dead_vs_live(log: RunLog, metric: str, segment: int) -> dict | None:
    """Compare a rollback segment's live points with the superseded first pass at the same steps.

    Returns the matched count, the median of (first pass - live) and its robust spread, or None.
    """
    s = log.series.get(metric)
    if s is None:
        return None
    live = s.alive & (s.segment == segment) & np.isfinite(s.values)
    dead = ~s.alive & (s.segment < segment) & np.isfinite(s.values)
    if not live.any() or not dead.any():
        return None
    ls, lv = s.steps[live], s.values[live]
    ds, dv = s.steps[dead], s.values[dead]
    common, li, di = np.intersect1d(ls, ds, return_indices=True)
    if len(common) < 5:
        return None
    diff = dv[di] - lv[li]
    med = float(np.median(diff))
    spread = MAD_TO_SIGMA * float(np.median(np.abs(diff - med)))
    return {"matched": int(len(common)), "first_step": int(common[0]), "last_step": int(common[-1]),
            "median_diff": med, "spread": spread, "level": float(np.median(dv[di]))}


def repeated_ids(log: RunLog) -> list[tuple[str, int, int]]:
    """(metric, first step whose data id was seen before, how many steps repeat) for id columns."""
    out = []
    for name in SAMPLE_ID_NAMES:
        if name not in log.series:
            continue
        steps, ids = log.live(name)
        ok = np.isfinite(ids)
        steps, ids = steps[ok], ids[ok]
        _, first = np.unique(ids, return_index=True)
        seen = np.ones(len(ids), dtype=bool)
        seen[first] = False
        if seen.any():
            out.append((name, int(steps[np.argmax(seen)]), int(seen.sum())))
    return out
