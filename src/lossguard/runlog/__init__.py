"""RunLog: what a training run logged, as step-indexed float arrays per metric.

A run is written in *segments*: the first launch and every resume. Each point remembers its
segment (and so its source file). :func:`lossguard.stitch.stitch` orders the segments and marks the
points that a later rollback superseded as dead; analysis looks only at live points.

Two modules: :mod:`.log` (the data: :class:`Segment`, :class:`Series`, :class:`RunLog`,
:func:`merge`) and :mod:`.builder` (how a reader makes one: :class:`RunLogBuilder`, which checks the
points once, and :func:`finite_or_nan`, the non-finite spellings frameworks write).
"""
from .builder import RunLogBuilder, finite_or_nan
from .log import RunLog, Segment, Series, merge

__all__ = ["RunLog", "RunLogBuilder", "Segment", "Series", "finite_or_nan", "merge"]
