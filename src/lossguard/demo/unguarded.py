"""One scenario trained unguarded: the tiny GPT, the scenario's optimizer, its loss and logits per step.

The reference runs behind the measurements in :mod:`lossguard.demo.scenarios`; the guarded demo
(:mod:`lossguard.demo.train`) builds its optimizer and held-out loss with the same functions.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

from .corpus import CorpusBatches, load_corpus
from .scenario import Scenario


@dataclass
class RunResult:
    """What one run of a scenario measured."""

    scenario: str
    losses: list
    """Training loss per step (NaN/inf kept as they were)."""
    grad_norms: list
    """Global gradient norm per step, before clipping."""
    attn_logit_max: list
    """Largest attention logit ``q.k/sqrt(d)`` over layers per step."""
    val: dict
    """``{step: held-out loss}`` every ``eval_every`` steps and at the end."""
    final_val: float
    """Held-out loss after the last step (inf if the run diverged to non-finite)."""
    diverged: bool
    """Whether a training loss became non-finite (the run then stops)."""
    wall_time: float
    """Seconds for the whole run, evaluation included."""


def build_optimizer(sc: Scenario, model):
    """The scenario's optimizer over ``model``'s parameters (no weight decay on norms/biases)."""
    import torch

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": sc.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    if sc.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=sc.lr, betas=sc.betas, eps=sc.eps, foreach=False)
    if sc.optimizer == "adamw_eps_free":
        from lossguard.techniques.adam_eps_free import AdamWEpsFree
        return AdamWEpsFree(groups, lr=sc.lr, betas=sc.betas)
    from lossguard.techniques.adam_eps_free import AdamAtan2
    return AdamAtan2(groups, lr=sc.lr, betas=sc.betas)


def held_out_loss(model, val_set) -> float:
    """Mean loss over the fixed held-out batches, in eval mode (dropout off), without gradients."""
    import torch

    model.eval()
    with torch.no_grad():
        v = sum(model(x, y)[1].item() for x, y in val_set) / len(val_set)
    model.train()
    return v


def run(sc: Scenario, *, on_step: Callable | None = None) -> RunResult:
    """Train the tiny GPT as ``sc`` says, unguarded; stops early if the loss becomes non-finite.

    Args:
        sc: the scenario.
        on_step: optional ``fn(step, loss, grad_norm)`` called after each step (progress bars).
    """
    import torch

    from lossguard.demo.model import GPTConfig, TinyGPT, attention_logit_max

    t0 = time.perf_counter()
    torch.manual_seed(sc.seed)
    model = TinyGPT(GPTConfig(**{"block_size": sc.seq_len, **sc.model}))
    opt = build_optimizer(sc, model)
    data = CorpusBatches(load_corpus(), batch_size=sc.batch_size, seq_len=sc.seq_len,
                         seed=sc.data_seed, pocket=sc.pocket)
    val_set = data.val_batches(sc.eval_batches)

    def evaluate() -> float:
        return held_out_loss(model, val_set)

    losses, gnorms, logits_max, val = [], [], [], {}
    diverged = False
    for step in range(sc.steps):
        for group in opt.param_groups:
            group["lr"] = sc.lr_at(step)
        x, y = data.batch(step)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        clip = sc.grad_clip if sc.grad_clip > 0 else float("inf")
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item()
        lv = loss.item()
        losses.append(lv)
        gnorms.append(gn)
        logits_max.append(max(attention_logit_max(model)))
        if on_step is not None:
            on_step(step, lv, gn)
        if not math.isfinite(lv):
            diverged = True
            break
        opt.step()
        if (step + 1) % sc.eval_every == 0:
            val[step + 1] = evaluate()
    final = float("inf") if diverged else evaluate()
    if not diverged:
        val[sc.steps] = final
    return RunResult(scenario=sc.name, losses=losses, grad_norms=gnorms,
                     attn_logit_max=logits_max, val=val, final_val=final, diverged=diverged,
                     wall_time=time.perf_counter() - t0)
