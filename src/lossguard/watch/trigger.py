"""OnlineTrigger: the shared online detectors on a followed run's loss, one point at a time.

They cost O(1) a point and decide two things only: when to raise an alert (a point left its band,
so a spike has begun; a value is NaN/Inf) and when an incident may have been decided (an episode
closed, a divergence was declared, a NaN run began or ended), which is when :mod:`.engine` runs the
classification. The incidents themselves always come from the classification, so that they are the
ones ``analyze`` names.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..classify.settings import AnalyzeConfig
from ..detect.episode import OnlineEpisodes
from ..detect.nonfinite import OnlineNonFinite
from ..detect.outlier import OnlineOutlier
from ..detect.trend import OnlineTrend


class OnlineTrigger:
    """The online detectors on the loss, fed in arrival order: alerts and "classify now" signals.

    Args:
        settings: the analysis settings (the detectors' thresholds and budgets come from them).
        interval: the run's log interval in steps (episode budgets are in points).
    """

    def __init__(self, settings: AnalyzeConfig, interval: int) -> None:
        cfg = settings.for_interval(interval)
        self.outlier = OnlineOutlier(replace(cfg.outlier, side="up"))
        self.episodes = OnlineEpisodes(cfg.spike)
        self.trend = OnlineTrend(cfg.trend)
        self.nonfinite = OnlineNonFinite()
        self.active_onset: int | None = None  # step of the open episode's onset

    def update(self, step: int, value: float) -> tuple[dict | None, bool]:
        """Feed one point.

        Returns:
            The alert's facts (``what``, ``step``, ``value`` and for outliers ``baseline``,
            ``noise``, ``z``) or None, and whether a decision may have been made at this point.
        """
        was_nan = self.nonfinite.active is not None
        closed = self.nonfinite.update(value) is not None
        if not math.isfinite(value):
            alert = None if was_nan else {"what": "non_finite", "step": step, "value": value}
            return alert, not was_nan
        v = self.outlier.update(value)
        opened_before = self.episodes.active is not None
        ep = self.episodes.update(value, v.outlier, v.baseline, v.noise)
        decided = closed or ep is not None
        alert = None
        if ep is not None:
            self.active_onset = None
        if not opened_before and self.episodes.active is not None:
            self.active_onset = step
            alert = {"what": "outlier", "step": step, "value": value, "baseline": v.baseline, "noise": v.noise,
                     "z": v.z}
        if self.trend.update(v.baseline, v.noise) is not None:
            decided = True
        return alert, decided
