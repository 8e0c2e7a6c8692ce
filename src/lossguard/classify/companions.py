"""The companion series of a run: loss streams of a data mix, the grad norm, NaN counters and the
fp16 loss scale. Each function appends incidents to the list :func:`.assemble.find_incidents` builds
from the loss, folding what belongs to a loss event into it (a grad-norm spike that led a loss
spike, the mixed loss's view of a one-stream spike).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .. import metrics as M
from ..detect.loss_scale import find_bursts, find_collapses, is_static
from ..detect.nonfinite import find_nonfinite
from ..detect.series import detect_series
from ..runlog import RunLog
from ..recovery.severity import Severity
from .classifier import spike_incident
from .incident import Incident, IncidentKind as K
from .settings import AnalyzeConfig


def _overlap(a0: int, a1: int, b0: int, b1: int) -> bool:
    return a0 <= b1 and b0 <= a1


def stream_spikes(log: RunLog, metric: str, dcfg, cfg: AnalyzeConfig, k: int, out: list[Incident],
                  explained: list[tuple[int, int]]) -> None:
    """Spikes on one stream of a mix (and not on the others) are stream spikes."""
    # Every stream of the mix, the analysed one included when the log has no mixed loss (then the
    # "loss" analysed is its first stream, and a spike there is still a spike on one stream).
    stream = {m: sn for m, sn in ((m, M.stream_of(m)) for m in log.metrics)
              if sn is not None and (m != metric or M.stream_of(metric))}
    names = list(stream)
    if len(names) < 2:
        return
    found = {}
    for name in names:
        s, v = log.live(name)
        sev = detect_series(s, v, dcfg, dips=False, trend=False)
        found[name] = [(int(sev.steps[e.onset]), int(sev.steps[e.closed]), e, sev) for e in sev.spikes]
    tol = 2 * k
    for name, eps in found.items():
        for a, z, e, sev in eps:
            if any(x0 <= a <= x1 for x0, x1 in explained):
                continue
            single = e.end is not None and e.end - e.onset <= dcfg.spike.settle // 2 + 1
            if single and (e.peak_value - e.base) < cfg.stream_single_z * e.noise:
                continue  # one noisy point of a noisier per-stream loss, not a data-specific spike
            others = [o for o in names
                      if o != name and any(_overlap(a - tol, z + tol, a2, z2) for a2, z2, _, _ in found[o])]
            if len(others) + 1 == len(names):
                continue  # every stream spiked: the loss incident covers it
            if any(stream[o] < stream[name] for o in others):
                continue  # reported once, under the first stream of the group
            group = sorted([stream[name]] + [stream[o] for o in others])
            spike = spike_incident(sev, e, name, cfg, k, group)
            quiet = [stream[o] for o in names if stream[o] not in group]
            inc = replace(spike, kind=K.STREAM_SPIKE, details={**spike.details, "recovery": spike.kind.value},
                          evidence=spike.evidence + f" Only stream(s) {', '.join(group)} spiked; "
                                                    f"{', '.join(quiet)} did not.")
            # The mixed loss may show the same event: fold it in.
            for other in list(out):
                if other.metric == metric and other.kind in (K.SPIKE_FAST, K.SPIKE_SLOW, K.SPIKE_NO_RECOVERY) \
                        and _overlap(inc.onset - tol, (inc.end or inc.peak) + tol,
                                     other.onset, other.end or other.peak):
                    out.remove(other)
            out.append(inc)


def grad_norm_spikes(log: RunLog, dcfg, cfg: AnalyzeConfig, k: int, out: list[Incident]) -> None:
    """Grad-norm episodes: evidence on the loss event they lead, else grad-norm spikes of their own."""
    if M.GRAD_NORM not in log.series:
        return
    s, v = log.live(M.GRAD_NORM)
    # A norm is >= 0 by definition: its level is its scale, so the near-zero abstention does not apply.
    gcfg = replace(dcfg, outlier=replace(dcfg.outlier, rel_threshold=cfg.grad_norm_rel, min_snr=0.0))
    gev = detect_series(s, v, gcfg, dips=False, trend=False)
    lead = cfg.grad_lead_points * k
    for e in gev.spikes:
        a, z = int(gev.steps[e.onset]), int(gev.steps[e.closed])
        owner = next((i for i in out if i.kind not in (K.GRAD_NORM_SPIKE, K.NON_FINITE)
                      and _overlap(a, z, i.onset - lead, (i.end if i.end is not None else i.peak) + lead)), None)
        excess = e.peak_value - e.base
        if owner is not None:
            peak_step = int(gev.steps[e.peak])
            owner.details.setdefault("grad_norm", {"onset": a, "peak": peak_step, "ratio": e.peak_value / e.base})
            if a < owner.onset:
                owner.evidence += (f" The grad norm rose first, at step {a} "
                                   f"({e.peak_value / e.base:.1f}x at step {peak_step}).")
            continue
        spike = spike_incident(gev, e, M.GRAD_NORM, cfg, k, [])
        out.append(replace(spike, kind=K.GRAD_NORM_SPIKE, magnitude=excess,
                           severity=Severity.WARNING if e.peak_value >= 10 * e.base else Severity.INFO,
                           evidence=spike.evidence + " The loss did not move (yet): grad-norm spikes often build "
                                                     "up before a loss spike."))


def nonfinite_incidents(log: RunLog, metric: str, out: list[Incident]) -> None:
    """Runs of NaN/Inf in the loss, the grad norm or a stream, and NaN-iteration counters."""
    for name in [metric, M.GRAD_NORM] + [m for m in log.metrics if M.stream_of(m) is not None and m != metric]:
        if name not in log.series:
            continue
        steps, values = log.live(name)
        for r in find_nonfinite(values):
            a, z = int(steps[r.start]), int(steps[r.stop])
            if any(i.kind == K.NON_FINITE and _overlap(a, z, i.onset, i.peak if i.end is None else i.end) for i in out):
                continue
            n = r.stop - r.start + 1
            end = int(steps[r.stop + 1]) if r.recovered else None
            what = "NaN" if r.nan == n else ("Inf" if r.nan == 0 else "NaN/Inf")
            ev = (f"The {name} was {what} at {n} logged point(s) from step {a}" +
                  (f"; finite again at step {end}." if end is not None else " to the end of the log."))
            out.append(Incident(kind=K.NON_FINITE, metric=name, onset=a, peak=a, end=end, baseline=float("nan"),
                                peak_value=float("nan"), magnitude=float("nan"), magnitude_sigma=float("nan"),
                                severity=Severity.CRITICAL, evidence=ev, details={"points": n, "nan": r.nan}))
    if M.NAN_ITERS in log.series:
        steps, values = log.live(M.NAN_ITERS)
        for i in np.flatnonzero(np.nan_to_num(values) > 0):
            a = int(steps[i])
            if not any(x.kind == K.NON_FINITE and abs(x.onset - a) <= 0 for x in out):
                out.append(Incident(kind=K.NON_FINITE, metric=M.NAN_ITERS, onset=a, peak=a, end=None,
                                    baseline=float("nan"), peak_value=float("nan"), magnitude=float(values[i]),
                                    magnitude_sigma=float("nan"), severity=Severity.CRITICAL,
                                    evidence=f"The log counts {int(values[i])} NaN iteration(s) at step {a}."))


def loss_scale_collapses(log: RunLog, cfg: AnalyzeConfig, out: list[Incident]) -> None:
    """fp16 loss-scale collapses, with the skipped iterations counted where the log has them."""
    if M.LOSS_SCALE not in log.series:
        return
    steps, scale = log.live(M.LOSS_SCALE)
    skipped = None
    if M.SKIPPED_ITERS in log.series:
        ss, sv = log.live(M.SKIPPED_ITERS)
        skipped = (ss, np.nan_to_num(sv))
    if is_static(scale) and (skipped is None or not skipped[1].any()):
        return  # bf16's "loss scale: 1.0" on every line: no dynamic scale, nothing collapsed
    floor = find_collapses(scale, cfg.loss_scale)
    # A burst of halvings that runs into a collapse to the floor is that collapse's beginning.
    bursts = [b for b in find_bursts(steps, scale, cfg.loss_scale)
              if not any(_overlap(b.onset, b.stop + 1, c.onset, c.stop) for c in floor)]
    for c in sorted(floor + bursts, key=lambda c: c.onset):
        onset = c.trigger
        while onset > 0 and scale[onset - 1] > scale[onset] and onset > c.onset:
            onset -= 1
        if c.min_scale > cfg.loss_scale.floor:
            onset = c.onset  # a burst begins at its first halving, plateaus included
        a = int(steps[onset])
        note = ""
        if skipped is not None:
            win = (skipped[0] >= a) & (skipped[0] <= int(steps[c.stop]))
            note = f"; {int(skipped[1][win].sum())} iterations were skipped from step {a} on"
        if c.min_scale <= cfg.loss_scale.floor:
            what = (f"fell from {scale[onset - 1] if onset else c.peak_scale:.4g} to {c.min_scale:.4g} "
                    f"(floor {cfg.loss_scale.floor:g}) at step {int(steps[c.trigger])}")
        else:
            halvings = int(round(np.log2(c.peak_scale / c.min_scale)))
            what = (f"halved {halvings} times between steps {int(steps[onset - 1])} and {int(steps[c.stop])} "
                    f"({c.stop - onset + 1} logged steps), {c.peak_scale:.4g} -> {c.min_scale:.4g}, "
                    "without growing back")
        out.append(Incident(kind=K.LOSS_SCALE_COLLAPSE, metric=M.LOSS_SCALE, onset=a, peak=int(steps[c.trigger]),
                            end=int(steps[c.stop + 1]) if c.recovered else None, baseline=float(c.peak_scale),
                            peak_value=c.min_scale, magnitude=c.min_scale - c.peak_scale,
                            magnitude_sigma=float("nan"), severity=Severity.CRITICAL,
                            evidence=(f"The fp16 loss scale {what}{note}: overflows on most steps, updates are "
                                      "being skipped."),
                            details={"floor": cfg.loss_scale.floor}))
