"""What the guard measures on every step before judging it: global loss, gradient norm, parameter norm.

Shared by the plain loop (:meth:`StabilityGuard.step`, which also unscales and clips) and framework
mode (:meth:`StabilityGuard.before_optimizer_step`, which leaves clipping to the framework). Under
DDP the loss is averaged over ranks in one small all-reduce; under FSDP2 (DTensor parameters) loss,
grad norm and the non-finite flag come from the local shards in ONE all-reduce, so every rank gets
the same numbers and therefore the same verdict.
"""
from __future__ import annotations

import math
from typing import Any

from .config import GuardConfig
from .judge.evidence import ramp_clipped
from .judge.twins import DeviceJudge, HostJudge, Judgement


class StepStats:
    """Measures one step and hands the numbers to the judge.

    Args:
        judge: the host or device judge the numbers go to.
        params: the trainable parameters (their gradients are measured, and clipped when asked).
        config: the guard's configuration (``max_grad_norm``, ``loss.min_points``).
        optimizer: the optimizer the GradScaler unscales.
        scaler: the ``GradScaler`` (None without fp16).
        world: the number of ranks (the loss is averaged over them).
        sharded: the parameters are FSDP2 DTensors.
    """

    def __init__(self, judge: HostJudge | DeviceJudge, params: list[Any], *, config: GuardConfig, optimizer: Any,
                 scaler: Any, world: int, sharded: bool) -> None:
        self.judge, self.params, self.config = judge, params, config
        self.optimizer, self.scaler, self.world, self.sharded = optimizer, scaler, world, sharded
        self.judged = 0
        """Steps judged by this process (the first ones get the sanity bound's scale)."""

    def judge_step_in_ramp(self, loss: Any, step: int, policy: Any, ramp: Any) -> tuple[Judgement, bool]:
        """The plain loop's :meth:`judge_step` (clipped), the LR-ramp evidence taken first: the LR
        this step will use (the ledger's cut included) goes into ``ramp`` (a
        :class:`~lossguard.recovery.lr_phase.LrRamp`, fed in step order); in the ramp, with the
        update clipped, grad-norm evidence is waived (:func:`~.judge.evidence.ramp_clipped`), unless
        the LR jumped rather than ramped.

        Returns:
            ``(judgement, in_lr_ramp)``.
        """
        groups = self.optimizer.param_groups
        lr = float(groups[0]["lr"]) * policy.lr_factor(step) if groups else math.nan  # as scale_lr sets it
        in_ramp = ramp.update(step, lr)
        # a ramp, not a jump: after an LR fault withholding still protects (recovery/lr_phase.py JUMP)
        waived = ramp_clipped(in_ramp and not ramp.jumped(step), self.config.max_grad_norm, self.config.lr_ramp_window)
        return self.judge_step(loss, clip=True, waived=waived), in_ramp

    def judge_step(self, loss: Any, *, clip: bool, waived: bool = False) -> Judgement:
        """Global loss, unscale, grad norm (clipped when ``clip``), then the judge's verdict
        (``waived``: grad-norm evidence waived, see :meth:`judge_step_in_ramp`)."""
        import torch

        if self.sharded:
            return self._judge_sharded(loss, clip=clip, waived=waived)
        local = loss.detach().to(torch.float64).reshape(())
        glob = local.clone()
        if self.world > 1:
            torch.distributed.all_reduce(glob)  # one small all-reduce: the statistics use the global loss
            glob /= self.world
        if clip and self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        from .gate import grad_norm
        gn = grad_norm(self.params, self.config.max_grad_norm if clip else None).to(torch.float64)
        # The first steps' sanity bound needs a scale before any grad norm was accepted: the
        # parameter norm. Only while the loss test is cold (a host-side step count; no sync later).
        pn = None
        if self.judged < self.config.loss.min_points:
            pn = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.detach().to(torch.float64))
                                                       for p in self.params])) if self.params else None
        self.judged += 1
        if isinstance(self.judge, HostJudge):
            return self.judge.judge(float(glob), float(gn), float(local), math.nan if pn is None else float(pn),
                                    waived)
        return self.judge.judge(glob, gn, local, pn, waived)

    def _judge_sharded(self, loss: Any, *, clip: bool, waived: bool = False) -> Judgement:
        """FSDP2: the statistics from the local shards in one all-reduce
        (:func:`lossguard.distributed.fsdp.reduce_step_stats`)."""
        import torch

        from ..distributed.fsdp import clip_sharded_grads_, reduce_step_stats

        if clip and self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        warm = self.judged < self.config.loss.min_points
        stats = reduce_step_stats(loss, self.params, param_norm=warm)
        if clip and self.config.max_grad_norm is not None:
            clip_sharded_grads_(self.params, self.config.max_grad_norm, stats.grad_norm)
        self.judged += 1
        local = loss.detach().to(torch.float64).reshape(())
        if isinstance(self.judge, HostJudge):
            pn = math.nan if stats.param_norm is None else float(stats.param_norm)
            return self.judge.judge(float(stats.loss), float(stats.grad_norm), float(local), pn, waived)
        return self.judge.judge(stats.loss, stats.grad_norm, local, stats.param_norm, waived)
