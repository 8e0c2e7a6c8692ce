"""One training run of a demo scenario, unguarded or guarded, writing a JSONL log.

Both variants share everything but the guard: the model is built after ``torch.manual_seed(seed)``,
the optimizer is the scenario's (:func:`lossguard.demo.scenarios.build_optimizer`), the LR follows
``Scenario.lr_at`` through a ``LambdaLR`` (so a rollback restores it with the scheduler), and the
batch with global data index ``i`` is ``CorpusBatches.batch(i)``. The unguarded run reads batch
``i`` at step ``i``; the guarded run reads its batches through a :class:`ResumableSampler` (one
"sample" = one whole batch index, no shuffling), so a rollback rewinds the data exactly and a data
skip is O(1). Until the guard first acts, the two runs are the same computation step for step.

Log records (one JSON object per line, read by ``lossguard analyze``):

- ``{"step": s, "loss": ..., "grad_norm": ..., "lr": ...}`` per step (the guarded run's come from
  the guard's own log, with its decision records -- ``skip``, ``rollback``, ``lr_cut``, ``halt`` --
  between them);
- ``{"step": s, "val_loss": ...}`` every ``eval_every`` steps and at the end (held-out loss on the
  scenario's fixed held-out batches; ``s`` counts optimizer steps of the live timeline).
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import require
from .corpus import CorpusBatches, load_corpus
from .scenario import Scenario
from .unguarded import build_optimizer, held_out_loss


@dataclass
class TrainResult:
    """What one demo run did."""

    scenario: str
    """Name of the scenario."""
    guarded: bool
    """Whether the StabilityGuard drove the loop."""
    seed: int
    """Model seed."""
    log_path: str | None
    """The JSONL log written (None if none was asked for)."""
    final_val: float
    """Held-out loss at the end (``inf`` if the run diverged to a non-finite loss)."""
    val: dict = field(default_factory=dict)
    """``{step: held-out loss}`` of the live timeline."""
    diverged: bool = False
    """A training loss became non-finite in the unguarded run (it then stops)."""
    halted: bool = False
    """The guard halted the run (its rollback budget was spent)."""
    diverged_at: int | None = None
    """Step of the first non-finite loss (unguarded)."""
    steps: int = 0
    """Steps of the live timeline at the end (the scenario's ``steps`` unless stopped early)."""
    computed_steps: int = 0
    """Forward/backward passes done, including the steps a rollback threw away."""
    skipped_steps: list = field(default_factory=list)
    """Steps whose update the guard withheld (as logged; a step may recur after a rollback)."""
    rollbacks: list = field(default_factory=list)
    """``{"step", "to_step", "skip_batches"}`` of every rollback, in order."""
    lr_cuts: list = field(default_factory=list)
    """``{"step", "factor", "until_step"}`` of every LR cut."""
    events: list = field(default_factory=list)
    """All decision records of the guard."""
    diagnosis: str | None = None
    """The guard's halt diagnosis, if it halted."""
    wall_time: float = 0.0
    """Seconds for the whole run, evaluation included."""

    @property
    def steps_lost(self) -> int:
        """Steps computed and then thrown away by rollbacks."""
        return self.computed_steps - self.steps

    def to_dict(self) -> dict:
        """JSON-ready summary (``inf`` written as ``None``)."""
        def num(v):
            return v if isinstance(v, (int, float)) and math.isfinite(v) else None
        return {"scenario": self.scenario, "guarded": self.guarded, "seed": self.seed, "log": self.log_path,
                "final_val_loss": num(self.final_val), "val_loss": {str(k): num(v) for k, v in self.val.items()},
                "diverged": self.diverged, "diverged_at": self.diverged_at, "halted": self.halted,
                "steps": self.steps, "computed_steps": self.computed_steps, "steps_lost": self.steps_lost,
                "skipped_steps": list(self.skipped_steps), "rollbacks": list(self.rollbacks),
                "lr_cuts": list(self.lr_cuts), "diagnosis": self.diagnosis, "wall_time_s": round(self.wall_time, 2)}


def demo_guard_config(sc: Scenario, **overrides):
    """The guard settings the demo uses, scaled to a run of ``sc.steps`` steps.

    PaLM rolled back ~100 steps and skipped 200-500 batches in a run of 255k steps checkpointed
    often; the demo's runs are 500 steps, so it checkpoints every 50 steps, rolls back >= 50 steps
    before an episode and skips the episode's batches plus 50 more. Everything else is the guard's
    default (the analyser's outlier test, 3 bad steps make an episode, 3 rollbacks at most).
    """
    from dataclasses import fields

    from ..guard import GuardConfig
    from ..recovery import RecoveryRecipe

    every = max(10, sc.steps // 10)
    # Recipe fields may come flat in `overrides` (benchmarks/recovery.py): route them to the recipe.
    names = {f.name for f in fields(RecoveryRecipe)}
    # The demo scales the recipe to its short run itself (one checkpoint interval, 10% of the run),
    # so the default cap on the margin (max_skip_fraction, 5%) is lifted: its README numbers stand.
    recipe: dict[str, Any] = {"rollback_distance": every, "skip_margin": every, "max_skip_fraction": 1.0}
    recipe.update({k: v for k, v in overrides.items() if k in names})
    base: dict[str, Any] = dict(checkpoint_every=every, recipe=RecoveryRecipe(**recipe))
    base.update({k: v for k, v in overrides.items() if k not in names})
    return GuardConfig(**base)


class _IndexedBatches:
    """Re-iterable stream of corpus batches in :class:`ResumableSampler` order (batch index = sample id)."""

    def __init__(self, data: CorpusBatches, sampler) -> None:
        self.data, self.sampler = data, sampler

    def __iter__(self):
        for ids in self.sampler:
            yield self.data.batch(int(ids[0]))


def _build(sc: Scenario):
    import torch

    from .model import GPTConfig, TinyGPT

    torch.manual_seed(sc.seed)
    model = TinyGPT(GPTConfig(**{"block_size": sc.seq_len, **sc.model}))
    opt = build_optimizer(sc, model)
    # LambdaLR multiplies the optimizer's initial lr (sc.lr) by the factor: lr(step) == sc.lr_at(step).
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: sc.lr_at(s) / sc.lr)
    data = CorpusBatches(load_corpus(), batch_size=sc.batch_size, seq_len=sc.seq_len,
                         seed=sc.data_seed, pocket=sc.pocket)
    return model, opt, sched, data


def _evaluator(model, val_set):
    return lambda: held_out_loss(model, val_set)


def train(sc: Scenario, *, guarded: bool, log_path: str | Path | None = None, ckpt_dir: str | Path | None = None,
          guard_config=None, on_step: Callable[[int, float], None] | None = None) -> TrainResult:
    """Train the tiny GPT as ``sc`` says, with or without the StabilityGuard.

    Args:
        sc: the scenario (model, data, pocket, LR, optimizer, seed).
        guarded: drive the loop with :class:`lossguard.guard.StabilityGuard`.
        log_path: the JSONL log to write (created; appended to if it exists).
        ckpt_dir: the guard's checkpoint directory (needed when ``guarded``).
        guard_config: a :class:`lossguard.guard.GuardConfig`; default :func:`demo_guard_config`.
        on_step: ``fn(step, loss)`` after every computed step (progress bars); the guarded run's
            step goes back after a rollback.

    Returns:
        The :class:`TrainResult`.
    """
    require("torch", "demo", "lossguard demo")
    t0 = time.perf_counter()
    model, opt, sched, data = _build(sc)
    evaluate = _evaluator(model, data.val_batches(sc.eval_batches))
    res = TrainResult(scenario=sc.name, guarded=guarded, seed=sc.seed,
                      log_path=None if log_path is None else str(log_path), final_val=math.inf)
    if guarded:
        if ckpt_dir is None:
            from ..errors import ConfigError
            raise ConfigError("a guarded demo run needs a checkpoint directory", fix="pass ckpt_dir=")
        _train_guarded(sc, model, opt, sched, data, evaluate, res, log_path, ckpt_dir,
                       guard_config or demo_guard_config(sc), on_step)
    else:
        _train_plain(sc, model, opt, sched, data, evaluate, res, log_path, on_step)
    res.wall_time = time.perf_counter() - t0
    return res


def _train_plain(sc, model, opt, sched, data, evaluate, res, log_path, on_step) -> None:
    import torch

    fh = None
    if log_path is not None:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        fh = open(log_path, "a", encoding="utf-8")
    clip = sc.grad_clip if sc.grad_clip > 0 else math.inf
    try:
        for step in range(sc.steps):
            x, y = data.batch(step)
            _, loss = model(x, y)
            loss.backward()
            gn = float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip))
            lv, lr = loss.item(), float(opt.param_groups[0]["lr"])
            res.computed_steps += 1
            if fh is not None:
                fh.write(json.dumps({"step": step, "loss": lv, "grad_norm": gn, "lr": lr}) + "\n")
            if on_step is not None:
                on_step(step, lv)
            if not math.isfinite(lv):  # a NaN loss poisons every weight it touches: the run is over
                res.diverged, res.diverged_at, res.steps = True, step, step
                break
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            res.steps = step + 1
            if res.steps % sc.eval_every == 0 or res.steps == sc.steps:
                res.val[res.steps] = evaluate()
                if fh is not None:
                    fh.write(json.dumps({"step": res.steps, "val_loss": res.val[res.steps]}) + "\n")
        res.final_val = math.inf if res.diverged else res.val.get(res.steps, evaluate())
        if not math.isfinite(res.final_val):
            res.diverged = True
    finally:
        if fh is not None:
            fh.close()


def _train_guarded(sc, model, opt, sched, data, evaluate, res, log_path, ckpt_dir, cfg, on_step) -> None:
    from ..checkpoint.store import CheckpointStore
    from ..data.sampler import ResumableSampler
    from ..guard import GuardConfig, StabilityGuard, TrainingHalted

    if cfg.max_grad_norm is None and sc.grad_clip > 0:
        from dataclasses import replace
        cfg = replace(cfg, max_grad_norm=sc.grad_clip)
    assert isinstance(cfg, GuardConfig)
    # One "sample" per batch index, in order; room for every skip a rollback can ask for.
    n_index = sc.steps + (cfg.max_rollbacks + 1) * (sc.steps + cfg.recipe.skip_margin + 1)
    sampler = ResumableSampler(n_index, batch_size=1, seed=0, shuffle=False)
    # keep_last covers the rollback distance: the target is >= rollback_distance before the onset.
    keep = 2 + (cfg.recipe.rollback_distance // cfg.checkpoint_every if cfg.checkpoint_every else 0)
    store = CheckpointStore(ckpt_dir, keep_last=keep)
    guard = StabilityGuard(model, opt, store=store, sampler=sampler, scheduler=sched, config=cfg,
                           log_path=log_path)
    try:
        for step, (x, y) in guard.batches(_IndexedBatches(data, sampler), steps=sc.steps):
            _, loss = model(x, y)
            loss.backward()
            lv = loss.item()
            guard.step(loss, replay=lambda x=x, y=y: model(x, y)[1])
            res.computed_steps += 1
            if on_step is not None:
                on_step(step, lv)
            # Evaluate on the live timeline only: a step whose decision was a rollback moved the
            # counter back, and its weights are gone.
            done = guard.step_count
            if done == step + 1 and (done % sc.eval_every == 0 or done == sc.steps):
                res.val[done] = evaluate()
                guard.log.metrics(done, {"val_loss": res.val[done]})
    except TrainingHalted:
        pass
    finally:
        guard.close()
    res.halted = guard.halted
    res.diagnosis = guard.diagnosis
    res.steps = guard.step_count
    res.events = [dict(e) for e in guard.events]
    for e in res.events:
        kind = e.get("event")
        if kind == "skip":
            res.skipped_steps.append(int(e["step"]))
        elif kind == "rollback" and "to_step" in e:
            res.rollbacks.append({"step": int(e["step"]), "to_step": int(e["to_step"]),
                                  "skip_batches": e.get("skip_batches")})
        elif kind == "lr_cut":
            res.lr_cuts.append({"step": int(e["step"]), "factor": e.get("factor"), "until_step": e.get("until_step")})
    if res.steps in res.val:
        res.final_val = res.val[res.steps]
    else:
        res.final_val = evaluate()
        res.val[res.steps] = res.final_val
        with open(log_path, "a", encoding="utf-8") if log_path is not None else _Null() as fh:
            fh.write(json.dumps({"step": res.steps, "val_loss": res.final_val}) + "\n")
    if not math.isfinite(res.final_val):
        res.diverged = True


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, _text: str) -> None:
        pass
