"""Stall incidents: a loss plateau far above where the run was heading, with its evidence in words.

The test is :func:`lossguard.detect.stall.find_stalls`; this pass reads the LR and the precursor
statistics the log has beside the loss (:data:`lossguard.metrics.LR`,
:data:`lossguard.metrics.ATTN_LOGIT_MAX`, :data:`lossguard.metrics.OUTPUT_LSE`) and writes the
evidence: how far above its early trend the loss sat, for how long, where the LR was, whether the
loss resumed when it decayed, and how large the attention logits grew.
"""
from __future__ import annotations

import math

import numpy as np

from .. import metrics as M
from ..detect.stall import Stall, StallConfig, find_stalls
from ..recovery.severity import Severity
from .context import Context
from .incident import Incident, IncidentKind as K


def _series(ctx: Context, name: str):
    return ctx.log.live(name) if name in ctx.log.series else None


def _evidence(st: Stall, metric: str) -> str:
    how = (f"nearly stopped improving (it fell by {st.decline:.3g})" if st.decline > st.tol
           else "stopped improving")
    words = [f"The {metric} {how} from step {st.onset} to {st.end} at about {st.level:.4g}, "
             f"while its progress before was heading to {st.expected:.4g} ({st.level - st.expected:.3g} lower)."]
    if st.lr_at_peak:
        words.append(f"The LR was at its peak over the plateau ({st.lr_ratio:.0%} of its largest value) and "
                     "decays later.")
    elif st.lr_at_peak is False and math.isfinite(st.lr_ratio):
        words.append(f"The LR over the plateau was {st.lr_ratio:.0%} of its largest value.")
    if st.resumed_at is not None:
        words.append(f"The loss resumed falling at step {st.resumed_at} (ending at {st.final_level:.4g}): the "
                     "run had not converged; it was stuck.")
    else:
        words.append("It has not resumed by the end of the log.")
    if math.isfinite(st.attn_max):
        words.append(f"The largest attention logit reached {st.attn_max:.4g} by the plateau's end"
                     + (" (attention-logit growth, Wortsman et al. 2023)." if "attn_logits" in st.reasons else "."))
    return " ".join(words)


def stall_pass(ctx: Context, cfg: StallConfig | None = None) -> None:
    """Append a :data:`IncidentKind.STALL` for every stall of the analysed loss."""
    steps, values = ctx.log.live(ctx.metric)
    lr, attn = _series(ctx, M.LR), _series(ctx, M.ATTN_LOGIT_MAX)
    for st in find_stalls(steps, values, lr=lr, attn=attn, cfg=cfg):
        details = {"expected": st.expected, "level": st.level, "tolerance": st.tol, "decline": st.decline,
                   "tests": list(st.reasons),
                   "resumed_at": st.resumed_at, "lr_at_peak": st.lr_at_peak,
                   "lr_ratio": None if not math.isfinite(st.lr_ratio) else st.lr_ratio,
                   "attn_logit_max": None if not math.isfinite(st.attn_max) else st.attn_max}
        lse = _series(ctx, M.OUTPUT_LSE)
        if lse is not None:
            inside = lse[1][(lse[0] >= st.onset) & (lse[0] <= st.end)]
            if len(inside) and np.isfinite(inside).any():
                details["output_lse"] = float(np.nanmedian(inside))
        gap = st.level - st.expected
        ctx.incidents.append(Incident(
            kind=K.STALL, metric=ctx.metric, onset=st.onset, peak=st.end,
            end=st.resumed_at, baseline=st.expected, peak_value=st.level, magnitude=gap,
            magnitude_sigma=gap / st.tol * 3.0 if st.tol > 0 else float("nan"),
            recovery_steps=None if st.resumed_at is None else st.resumed_at - st.end,
            severity=Severity.WARNING, evidence=_evidence(st, ctx.metric), details=details))
