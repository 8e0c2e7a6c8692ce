"""The zoo's ``transformers.Trainer`` loop: the HF family, unguarded or with the HF StabilityCallback.

The Trainer owns the data loader (its own shuffled sampler, seeded by the run's seed), the optimizer
step and the clipping (its default ``max_grad_norm=1.0``, as a new user leaves it). The zoo gives it
its own optimizer and ``LambdaLR`` (``optimizers=``), a collator that turns the batches at the
pocket's positions into garbage (counted in the order the loader yields them), and a callback that
injects the early gradient fault at ``on_pre_optimizer_step`` -- after the Trainer's clipping, so the
guard sees the fault -- placed before the guard's callback.

Guarded runs use the HF restart path as a user under ``torchrun --max-restarts`` would: the Trainer
saves a checkpoint every ``checkpoint_every`` steps; when the callback ends the process with exit
code 75 (a rollback booked in the run ledger), the run is launched again -- model, optimizer,
Trainer and callback built afresh -- with ``resume_from_checkpoint=resume_checkpoint(output_dir)``;
exit code 77 (or ``TrainingHalted``) is a halt. Relaunches happen in this process (everything is
rebuilt; the ledger and checkpoints on disk are all that carries over), at most ``MAX_RESTARTS``.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from evals.zoo import adapter, scenarios
from evals.zoo.family import Family, final_held_out_loss
from evals.zoo.loop import build_optimizer
from evals.zoo.spec import Outcome, RunSpec

MAX_RESTARTS = 5
"""Relaunches after exit code 75 (as ``torchrun --max-restarts 5`` would allow)."""


class _Collator:
    """Stacks ``(x, y)`` samples into ``{"input_ids", "labels"}``; garbage at the pocket's positions."""

    def __init__(self, spec: RunSpec, family: Family) -> None:
        self.spec, self.family, self.position = spec, family, 0
        self.pocket = scenarios.pocket(spec)

    def __call__(self, samples):
        x = torch.stack([s[0] for s in samples])
        y = torch.stack([s[1] for s in samples])
        if self.position in self.pocket:
            x, y = self.family.garbage((x, y), scenarios.garbage_generator(self.spec, self.position))
        self.position += 1
        return {"input_ids": x, "labels": x}


def run_hf(spec: RunSpec, family: Family, *, config=None, workdir: Path | None = None) -> Outcome:
    """Train one HF zoo run as ``spec`` says; returns its :class:`Outcome` (see :func:`.loop.run_plain`)."""
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="lossguard-zoo-hf-") as tmp:
            return run_hf(spec, family, config=config, workdir=Path(tmp))
    import transformers
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from lossguard.integrations.hf import resume_checkpoint

    t0 = time.perf_counter()
    transformers.logging.set_verbosity_error()
    train, held = family.data()
    out = Outcome(spec=spec)
    fault_at = scenarios.early_fault_step(spec)

    class Fault(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            if fault_at is not None and state.global_step == fault_at and not out.fault_steps:
                scenarios.inject_gradient_fault(spec, [p for p in model.parameters() if p.requires_grad])
                out.fault_steps.append(state.global_step)

    class Count(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            out.computed_steps += 1

    out_dir = workdir / "hf"
    every = adapter.checkpoint_every(config)
    events: list = []
    for attempt in range(MAX_RESTARTS + 1):
        # One attempt = one launch of the user's script: everything built afresh, then resumed from
        # the checkpoint the run ledger names after a rollback (the restart path, exit code 75).
        resume = resume_checkpoint(out_dir) if spec.guarded else None
        torch.manual_seed(spec.seed)
        model = family.model()
        opt = build_optimizer(spec, family, model)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, scenarios.lr_lambda(spec))
        collator = _Collator(spec, family)
        if resume is not None:  # the loader resumes at this step (no gradient accumulation)
            collator.position = int(Path(resume).name.rsplit("-", 1)[1])
        guard_cb = adapter.make_hf_callback(workdir=workdir, config=config) if spec.guarded else None
        save = dict(save_strategy="steps", save_steps=every) if guard_cb is not None and every else \
            dict(save_strategy="no")
        args = TrainingArguments(output_dir=str(out_dir), per_device_train_batch_size=spec.batch_size,
                                 max_steps=spec.steps, seed=spec.seed, report_to=[], disable_tqdm=True,
                                 logging_strategy="no", use_cpu=True, dataloader_num_workers=0,
                                 remove_unused_columns=False, **save)
        callbacks = [Fault(), Count()] + ([guard_cb] if guard_cb is not None else [])
        trainer = Trainer(model=model, args=args, train_dataset=train, data_collator=collator,
                          optimizers=(opt, sched), callbacks=callbacks)
        trainer.remove_callback(transformers.trainer_callback.PrinterCallback)
        code = 0
        try:
            trainer.train(resume_from_checkpoint=resume)
        except adapter.HALTED:
            code = adapter.EXIT_HALT  # a loud halt raised (no restart protocol): the outcome records it
        except SystemExit as e:  # the callback ends the process: 75 = relaunch me, 77 = halted for good
            code = int(e.code)
        if guard_cb is not None and guard_cb.guard is not None:
            events += guard_cb.guard.events
        if code != adapter.EXIT_ROLLBACK:
            break
        out.restarts += 1
    out.steps = trainer.state.global_step
    if spec.guarded:
        adapter.record_decisions(out, events, code == adapter.EXIT_HALT)
    out.final_val = final_held_out_loss(family, model, held)
    out.wall_time = time.perf_counter() - t0
    return out
