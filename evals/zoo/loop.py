"""The plain PyTorch loop of the zoo: the README's loop, unguarded or under the StabilityGuard.

Both variants read the data the README's way, ``DataLoader(dataset, batch_sampler=ResumableSampler)``,
re-iterating the loader at each epoch's end as ``guard.batches`` does, so until the guard first acts
the two runs are the same computation. The guard is built by :mod:`.adapter` with the default
``GuardConfig`` (checkpoint every 100 steps), as a new user would build it.
"""
from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path

import torch

from lossguard.data.iterate import iter_rng_neutral
from lossguard.data.sampler import ResumableSampler
from evals.zoo import adapter, scenarios
from evals.zoo.family import Family, final_held_out_loss
from evals.zoo.spec import Optim, Outcome, RunSpec


def build_optimizer(spec: RunSpec, family: Family, model: torch.nn.Module) -> torch.optim.Optimizer:
    """AdamW (weight decay 0.01 on matrices) or SGD with momentum 0.9, at the family's peak LR."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    lr = family.peak_lr(spec.optimizer)
    if spec.optimizer is Optim.ADAMW:
        return torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                                 lr=lr, foreach=False)
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, foreach=False)


class _Batches:
    """``(step, data position, batch)`` of an unguarded run, re-iterating the loader like ``guard.batches``
    (and creating its iterators the same RNG-neutral way, so the unguarded twin draws the same random
    numbers as the guarded run until the guard first acts);
    the batches at the ``drop`` positions are passed over without a step (the oracle's exact skip)."""

    def __init__(self, loader, sampler: ResumableSampler, steps: int, drop: range = range(0)) -> None:
        self.loader, self.sampler, self.steps, self.drop = loader, sampler, steps, drop

    def __iter__(self):
        it = iter_rng_neutral(self.loader)
        step = 0
        while step < self.steps:
            batch = next(it, None)
            if batch is None:
                it = iter_rng_neutral(self.loader)
                continue
            if self.sampler.position - 1 in self.drop:
                continue
            yield step, self.sampler.position - 1, batch
            step += 1


def run_plain(spec: RunSpec, family: Family, *, config=None, workdir: Path | None = None,
              record: bool = False) -> Outcome:
    """Train one plain-loop zoo run as ``spec`` says; returns its :class:`Outcome`.

    Args:
        spec: the run.
        family: its family (``FAMILIES[spec.family]``).
        config: a ``GuardConfig`` for guarded runs; None = the default.
        workdir: where the guard's checkpoints and log go; None = a temporary directory.
        record: keep the per-step training loss and gradient norm of an unguarded run in
            ``Outcome.series`` (to calibrate the guard's tests on healthy runs).
    """
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="lossguard-zoo-") as tmp:
            return run_plain(spec, family, config=config, workdir=Path(tmp), record=record)
    t0 = time.perf_counter()
    train, held = family.data()
    torch.manual_seed(spec.seed)
    model = family.model()
    model.train()
    opt = build_optimizer(spec, family, model)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, scenarios.lr_lambda(spec))
    sampler = ResumableSampler(len(train), batch_size=spec.batch_size, seed=spec.seed)
    loader = torch.utils.data.DataLoader(train, batch_sampler=sampler)
    pocket, fault_at = scenarios.pocket(spec), scenarios.early_fault_step(spec)
    out = Outcome(spec=spec)
    params = [p for p in model.parameters() if p.requires_grad]
    guard = None
    if spec.guarded:
        guard = adapter.make_guard(model, opt, scheduler=sched, sampler=sampler, workdir=workdir, config=config)
        stream = ((s, guard.batch_index, b) for s, b in guard.batches(loader, steps=spec.steps))
    else:
        stream = iter(_Batches(loader, sampler, spec.steps, drop=pocket if spec.oracle else range(0)))
    try:
        for step, position, batch in stream:
            if position in pocket:
                batch = family.garbage(batch, scenarios.garbage_generator(spec, position))
            loss = family.loss(model, batch)
            loss.backward()
            out.computed_steps += 1
            if fault_at is not None and step == fault_at and not out.fault_steps:
                scenarios.inject_gradient_fault(spec, params)
                out.fault_steps.append(step)
            if guard is not None:
                guard.step(loss)
                continue
            if record:
                gn = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params
                                                           if p.grad is not None]))
                out.series.setdefault("loss", []).append(loss.item())
                out.series.setdefault("grad_norm", []).append(gn.item())
            if not math.isfinite(loss.item()):
                break  # unguarded and poisoned: nothing after this can recover
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
    except adapter.HALTED:
        pass  # the guard halted the run: the outcome records it
    if guard is not None:
        guard.close()
        out.steps = guard.step_count
        adapter.record_decisions(out, guard.events, guard.halted)
    else:
        out.steps = out.computed_steps
    out.final_val = final_held_out_loss(family, model, held)
    out.wall_time = time.perf_counter() - t0
    return out
