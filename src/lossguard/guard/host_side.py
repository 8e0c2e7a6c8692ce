"""The host side of one guarded step, up to the policy: the verdict and what is learnt about it.

Runs once the step's packed values are on the host (at once on CPU, a step late on CUDA): decode
the verdict, note whether the LR is ramping, write the step's metrics line, let the precursor
treatments respond (decisions they ask the executor for go into ``meta["responses"]``), and --
for a withheld step -- run the replay check and name the samples that carried the excess. What to
*do* about the verdict is the policy's, carried out by the executor (:meth:`StabilityGuard._process`).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..recovery.verdict import Verdict
from .judge.twins import Judgement

if TYPE_CHECKING:
    from .guard import StabilityGuard


def read_step(guard: StabilityGuard, packed: Any, meta: dict[str, Any]) -> tuple[Verdict, bool]:
    """The verdict of one step, logged and examined.

    Args:
        guard: the guard the step belongs to.
        packed: the judge's packed values (host list or tensor), precursor values appended.
        meta: what the step knew when it ran: ``step``, ``batch_index``, ``lr``, ``loss_scale``,
            ``rng``, ``replay``, ``batch`` and optionally ``precursors`` (False: none were measured).

    Returns:
        ``(verdict, transient)``: transient when the replay check found the bad value does not
        come back on the same batch (a hardware or reduction glitch, not the data).
    """
    cfg = guard.config
    pre = None
    if guard.precursors is not None and meta.get("precursors", True):
        from .precursor_hook import split_precursors
        packed, pre = split_precursors(guard.precursors, packed)
    v = Judgement.verdict(packed, step=meta["step"], batch_index=meta["batch_index"], lr=meta["lr"],
                          loss_scale=meta["loss_scale"])
    # the policy's LR-schedule evidence (the plain loop took it before judging; framework mode here)
    v.in_lr_ramp = meta["in_lr_ramp"] if "in_lr_ramp" in meta else guard._lr_ramp.update(v.step, v.lr)
    guard.last_record = v
    if cfg.log_metrics:
        m = {"loss": v.loss, "grad_norm": v.grad_norm, "lr": v.lr}
        if guard.scaler is not None:
            m["loss_scale"] = v.loss_scale
        if pre is not None:
            m.update(guard.precursors.decode(pre))
        guard.log.metrics(v.step, m)
    if pre is not None:  # records are logged; decisions (an update jump's) go to the executor
        from .precursor_hook import respond
        meta.setdefault("responses", []).extend(respond(guard, v.step, v.lr, pre))
    transient = False
    # Replay only when the update was withheld: in shadow mode the weights already moved.
    if v.bad and meta["replay"] is not None and meta["rng"] is not None and cfg.replay and not cfg.shadow:
        from .replay import replay_check
        params = guard.stats.params
        transient = replay_check(v, meta, world=guard.stats.world, log=guard.log, rtol=cfg.replay_rtol,
                                 device=params[0].device if params else "cpu")
    if v.bad and not transient and guard.namer is not None and not cfg.shadow:
        guard.namer.name(step=v.step, batch_index=v.batch_index, batch=meta.get("batch"), rng=meta.get("rng"),
                         baseline=v.loss_baseline, loss_flagged=v.loss_outlier or not math.isfinite(v.loss)
                         or v.loss_z >= cfg.evidence.joint_loss_z)
    return v, transient
