"""What the precursor statistics in a log say, in words (the analyser's notes; ``report`` and
``watch`` show them because they re-use the analysis).

The guard logs them with ``precursors=True`` (:mod:`lossguard.guard.precursors`); any other logger
that writes the same metric names (:data:`lossguard.metrics.PRECURSORS`) gets the same notes.
"""
from __future__ import annotations

import numpy as np

from .. import metrics as M
from .context import Context

ATTN_HIGH = 100.0
"""A largest attention logit above this is named as growth (issue 20: 28-59 at stable LRs, 294 and
up at unstable ones; Kimi K2 clips at 100). The same threshold as ``StallConfig.attn_logit_high``
and ``TreatmentConfig.tau``."""
UPDATE_JUMP = 10.0
"""An update ratio this many times its run median is named (an LR jump multiplies it 10-30x)."""


def _live(ctx: Context, name: str):
    if name not in ctx.log.series:
        return None
    s, v = ctx.log.live(name)
    ok = np.isfinite(v)
    return (s[ok], v[ok]) if ok.any() else None


def precursor_notes(ctx: Context) -> None:
    """Append one note per precursor series the log has."""
    attn = _live(ctx, M.ATTN_LOGIT_MAX)
    if attn is not None:
        s, v = attn
        i = int(np.argmax(v))
        note = f"Largest attention logit: {v[i]:.4g} at step {int(s[i])}"
        over = np.flatnonzero(v > ATTN_HIGH)
        if len(over):
            note += (f"; above {ATTN_HIGH:g} from step {int(s[over[0]])} on {len(over)} logged steps: attention-logit "
                     "growth, the precursor of high-LR stalls (Wortsman et al. 2023); QK-LayerNorm, a lower peak LR "
                     "or the guard's QK-clip treatment keep it down.")
        else:
            note += f" (below {ATTN_HIGH:g} throughout)."
        ctx.notes.append(note)
    upd = _live(ctx, M.UPDATE_RATIO)
    if upd is not None:
        s, v = upd
        med = float(np.median(v))
        i = int(np.argmax(v))
        note = f"Update-to-weight ratio: median {med:.3g}, largest {v[i]:.3g} at step {int(s[i])}"
        if med > 0 and v[i] > UPDATE_JUMP * med:
            note += f" ({v[i] / med:.0f}x its median: an LR jump or a burst of large updates)."
        ctx.notes.append(note + ("" if note.endswith(".") else "."))
    lse = _live(ctx, M.OUTPUT_LSE)
    if lse is not None:
        s, v = lse
        ctx.notes.append(f"Output log-partition log Z: {v[0]:.3g} at step {int(s[0])}, {v[-1]:.3g} at the end "
                         f"(largest |log Z| {float(np.max(np.abs(v))):.3g}; z-loss holds it near 0).")
    adam = _live(ctx, M.ADAM_V_RATIO)
    if adam is not None:
        s, v = adam
        i = int(np.argmax(v))
        ctx.notes.append(f"Squared gradient / Adam's second moment: median {float(np.median(v)):.3g}, largest "
                         f"{v[i]:.3g} at step {int(s[i])} (>> 1: a gradient Adam's v had not seen).")
