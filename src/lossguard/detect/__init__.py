"""Detectors, one per file.

The per-series detectors the guard shares with the analyser are online state machines with a
vectorised whole-log twin, proven equal by tests: ``outlier`` (robust trailing median/MAD),
``episode`` (onset/peak/end against a baseline frozen at onset), ``trend`` (divergence), ``drop``
(steep falls) and ``nonfinite``; ``series`` runs them together. ``loss_scale``, ``resume``
(boundary tests: resume spikes, repeated data) and ``knot`` (where a trend turned) are whole-log
analyses only, as are ``regime`` (lasting jumps of the noise level), ``shift`` (window-median steps)
and the halving bursts of ``loss_scale``.
"""
