"""Decoder for a growing text log read by the grammar (:mod:`lossguard.io.text`).

New complete lines are fed to the same :class:`~lossguard.io.text.records.Scanner` the reader uses
(its record-header state carries over from one batch to the next), then the step and loss are
chosen and the points built by the reader's own :func:`~lossguard.io.text.choose.choose` and
:func:`~lossguard.io.text.build.build`, so ``watch`` reads exactly what ``analyze`` reads. Only the
points past the newest step already handed over (per launch and metric) are passed on; a launch
the text starts anew (a step going back) is handed over as a new segment.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..io.text.build import build
from ..io.text.choose import choose
from ..io.text.records import Scanner, iter_decoded
from .history import Points
from .lines import LineDecoder


@dataclass(frozen=True)
class GrammarKeys:
    """The user's choices for the text grammar, as ``analyze`` takes them (``--step-key``, ``--loss-key``)."""

    step_key: str | None = None
    """The printed counter that is the step (``'order'``, ``'epoch*batch'`` too); None: the best counter."""
    loss_key: str | None = None
    """The printed label that is the training loss; None: the best-ranked loss name."""

    @property
    def given(self) -> bool:
        """True when the user named a column (a text file is then read by the grammar, as ``read_log`` does)."""
        return self.step_key is not None or self.loss_key is not None


class TextDecoder(LineDecoder):
    """Any text log the grammar reads, followed as it grows."""

    format = "text"

    def __init__(self, path: str, keys: GrammarKeys | None = None) -> None:
        super().__init__(path)
        self.keys = keys or GrammarKeys()
        self._reset()

    def _reset(self) -> None:
        self._scanner = Scanner()
        self._newest: dict[tuple[int, str], int] = {}  # (segment, metric) -> newest step handed over
        self._segments = 0  # segments handed over so far

    def _parse(self, data: bytes, first_line: int, restart: bool) -> list[Points]:
        self._scanner.feed(iter_decoded(data, first_line))
        scan = self._scanner.scan
        choice = choose(scan.tables, loss_key=self.keys.loss_key, step_key=self.keys.step_key)
        if choice is None or not choice.tables:
            return []  # no loss line yet (start-up output)
        points = build(scan, choice)
        out: list[Points] = []
        for s, note in enumerate(points.notes):
            series = {}
            for name, (seg, step, val, _) in points.metrics.items():
                m = seg == s
                last = self._newest.get((s, name))
                if last is not None:
                    m &= step > last
                if m.any():
                    series[name] = (step[m].astype(np.int64), val[m])
                    self._newest[(s, name)] = int(step[m].max())
            if series:
                fresh = s >= self._segments and (s > 0 or restart)
                out.append(Points(self.path, series, new_segment=fresh, note=note))
        self._segments = max(self._segments, len(points.notes))
        return out
