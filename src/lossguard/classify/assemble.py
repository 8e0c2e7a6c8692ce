"""Run every detector on a stitched log and assemble one list of incidents.

:func:`find_incidents` runs the detectors of :mod:`lossguard.detect` on the loss, then separate
passes, each over what the passes before it left unclaimed (:class:`.context.Claims`):

1. repeated data at resumes (:mod:`.boundary`): its dip and its step back up are claimed;
2. divergences (:mod:`.divergence`) not explained by repeated data or by a spike;
3. spikes (:mod:`.loss_events`), a spike right after a resume being a resume spike;
4. resume spikes the spike pass did not see (:mod:`.boundary`);
5. sudden drops, then level shifts too small for the point test (:mod:`.loss_events`);
6. on a log shorter than the outlier window, the jumps the point test missed while its window
   filled, judged against the whole log's noise (:mod:`.short_spikes`);
7. regime changes: a lasting change of the noise level (:mod:`.regime`);
8. the short-log rules where the detectors have too few points to judge (:mod:`.short`): jumps
   and climbs on fewer than 32 points, sudden drops on logs too short for the windowed test;
   then stalls: a long plateau far above the early trend (:mod:`.stall`);
9. the companion series (:mod:`.companions`): loss streams, grad norm, NaN, fp16 loss scale;
10. stretches where no update was applied (:mod:`.updates_stopped`);
11. one event, one incident (:mod:`.merge`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import metrics as M
from ..detect.resume import boundary_indices
from ..detect.series import detect_series
from ..errors import LossguardError
from ..runlog import RunLog
from .boundary import repeated_data_pass, resume_spike_pass
from .companions import grad_norm_spikes, loss_scale_collapses, nonfinite_incidents, stream_spikes
from .context import Context
from .divergence import divergence_pass
from .incident import Incident
from .loss_events import drop_pass, shift_pass, spike_pass
from .merge import one_event_one_incident
from .regime import regime_pass
from .settings import AnalyzeConfig
from .short import coverage_notes, short_pass
from .short_spikes import short_spike_pass
from .precursors import precursor_notes
from .stall import stall_pass
from .updates_stopped import stalled_updates


@dataclass
class Found:
    """Incidents plus what the report needs to explain them."""

    incidents: list[Incident]
    metric: str
    interval: int
    notes: list[str] = field(default_factory=list)


def pick_metric(log: RunLog, metric: str | None) -> str:
    """The loss to analyse; a clear error naming what the log has when there is none."""
    if metric is not None:
        name = metric if metric in log.series else M.canonical_name(metric)
        if name not in log.series:
            raise LossguardError(f"no metric {metric!r} in this log; it has {', '.join(log.metrics)}",
                                 path=log.sources[0] if log.sources else None,
                                 fix="pass --metric with one of the names listed")
        return name
    if M.LOSS in log.series:
        return M.LOSS
    streams = [m for m in log.metrics if M.is_loss(m)]
    if streams:
        return streams[0]
    only_scale = M.LOSS_SCALE in log.series  # e.g. a paste of DeepSpeed overflow lines
    raise LossguardError(f"no training loss in this log; it has {', '.join(log.metrics)}",
                         path=log.sources[0] if log.sources else None,
                         fix=("this log has the fp16 loss scale but no loss: pass --metric loss_scale" if only_scale
                              else "pass --metric NAME to analyse another column"))


def log_interval(steps: np.ndarray) -> int:
    """Typical steps between logged points (median gap, at least 1)."""
    return max(1, int(np.median(np.diff(steps)))) if len(steps) > 1 else 1


def _stream_names(log: RunLog, metric: str) -> list[str]:
    return [s for m in log.metrics if (s := M.stream_of(m)) is not None and m != metric]


def _context(log: RunLog, cfg: AnalyzeConfig) -> Context:
    metric = pick_metric(log, cfg.metric)
    steps, values = log.live(metric)
    k = log_interval(steps)
    dcfg = cfg.for_interval(k, int(np.isfinite(values).sum()))
    ev = detect_series(steps, values, dcfg)
    ctx = Context(log=log, metric=metric, ev=ev, interval=k, dcfg=dcfg, cfg=cfg,
                  streams=_stream_names(log, metric) if metric == M.LOSS else [],
                  boundaries=boundary_indices(log, ev.steps))
    if len(ev.values) and np.isfinite(ev.noise).any():
        med, nz = np.nanmedian(ev.baseline), np.nanmedian(ev.noise)
        if abs(med) < dcfg.outlier.min_snr * nz:
            ctx.notes.append(f"The {metric} sits at zero within its noise (median {med:.3g}, noise {nz:.3g}), "
                             "like an RL objective: spike tests abstain where no level can be told from noise.")
    return ctx


def find_incidents(log: RunLog, cfg: AnalyzeConfig) -> Found:
    """Every incident of a stitched run, in onset order."""
    ctx = _context(log, cfg)
    for loss_pass in (repeated_data_pass, divergence_pass, spike_pass, resume_spike_pass, drop_pass, shift_pass,
                      short_spike_pass, regime_pass, short_pass, stall_pass):
        loss_pass(ctx)
    out, k = ctx.incidents, ctx.interval
    stream_spikes(log, ctx.metric, ctx.dcfg, cfg, k, out, ctx.claims.explained)
    grad_norm_spikes(log, ctx.dcfg, cfg, k, out)
    nonfinite_incidents(log, ctx.metric, out)
    loss_scale_collapses(log, cfg, out)
    precursor_notes(ctx)
    stalled_updates(log, ctx.metric, out)
    incidents = one_event_one_incident(ctx, out)
    incidents.sort(key=lambda i: (i.onset, i.kind.value))
    return Found(incidents, ctx.metric, k, ctx.notes + coverage_notes(ctx))
