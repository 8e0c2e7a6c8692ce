"""litgpt pretrain and finetune consoles (``fabric.print``).

Formats taken from github.com/Lightning-AI/litgpt @ 26857050fe3ff627cd714fe92f5838f51a3d5efa:
- litgpt/pretrain.py ``fit``: ``Epoch {e} | iter {iter} step {step} | loss train: {loss:.3f}, val: {val} | iter time:
  {ms:.2f} ms (step) remaining time: {timedelta}`` every log_iter_interval iterations (val is ``n/a`` until the
  first evaluation, then ``{:.3f}``); ``iter {n}: val loss {:.4f}, val time: {:.2f} ms``; ``Saving checkpoint to
  '...'``; start-up ``pprint.pformat(hparams)``, ``Total parameters: {:,}``, ``Measured TFLOPs: {:.2f}``.
- litgpt/finetune/lora.py ``fit``: the same line without remaining time, printed every iteration of a gradient
  accumulation, with `` (step)`` only on the iteration that steps the optimizer.
"""

from __future__ import annotations

from datetime import timedelta

from evals.console.curve import Event, EventKind
from evals.console.fixture import Run, Spec

PRE = "github.com/Lightning-AI/litgpt litgpt/pretrain.py fit (26857050fe3ff627cd714fe92f5838f51a3d5efa)"
FT = "github.com/Lightning-AI/litgpt litgpt/finetune/lora.py fit (26857050fe3ff627cd714fe92f5838f51a3d5efa)"
ACC = 4


def pretrain(run: Run) -> str:
    """litgpt pretrain: one line per optimizer step at log_interval, iter = step * grad accumulation."""
    out = ["Seed set to 42", "{'data': {'batch_size': 1, 'seed': 42, 'use_starcoder': True},", " 'devices': 'auto',",
           " 'eval': {'initial_validation': False, 'interval': 1000, 'max_iters': 100},", " 'model_name': 'tiny-llama-1.1b',",
           " 'out_dir': PosixPath('out/pretrain/tiny-llama'),", f" 'train': {{'global_batch_size': 512, 'log_interval': {run.spec.interval}, "
           f"'lr_warmup_steps': 2000, 'max_tokens': 3000000000000, 'micro_batch_size': 4, 'save_interval': 1000}}}}",
           "Time to instantiate model: 0.42 seconds.", "Total parameters: 1,100,048,384", "Validating ...",
           "Measured TFLOPs: 2907.23"]
    val = "n/a"
    for i in range(run.n):
        step = run.steps[i]
        it = step * ACC
        loss = run.show(i, f"{run.loss[i]:.3f}")
        ms = 412.0 * (1 + run.rng.uniform(-0.02, 0.02))
        out.append(f"Epoch 1 | iter {it} step {step} | loss train: {loss}, val: {val} | iter time: {ms:.2f} ms (step) "
                   f"remaining time: {timedelta(seconds=int((run.total - step) * ACC * 0.412))!s}")
        if step % 500 == 0:
            v = run.loss[i] + 0.04
            out.append("Validating ...")
            out.append(f"iter {it}: val loss {v:.4f}, val time: 8123.51 ms")
            val = f"{v:.3f}"
            out.append(f"Saving checkpoint to 'out/pretrain/tiny-llama/step-{step:08d}/lit_model.pth'")
    return "\n".join(out) + "\n"


def finetune(run: Run) -> str:
    """litgpt finetune lora: a line every iteration; ``(step)`` on every 2nd (gradient accumulation 2)."""
    out = ["{'checkpoint_dir': PosixPath('checkpoints/meta-llama/Llama-3.2-1B'),", " 'data': Alpaca2k(...),",
           " 'train': TrainArgs(save_interval=200, log_interval=1, global_batch_size=16, micro_batch_size=8, epochs=5)}",
           "Seed set to 1337", "Number of trainable parameters: 851,968", "Number of non-trainable parameters: 1,235,814,400",
           "The longest sequence length in the train data is 512, the model's maximum sequence length is 512 and context length is 131072",
           "Verifying settings ..."]
    per_epoch = 250
    val = "n/a"
    for i in range(run.n):
        it = run.steps[i]
        step = it // 2
        loss = run.show(i, f"{run.loss[i]:.3f}")
        ms = 212.0 * (1 + run.rng.uniform(-0.03, 0.03))
        out.append(f"Epoch {(it - 1) // per_epoch + 1} | iter {it} step {step} | loss train: {loss}, val: {val} | "
                   f"iter time: {ms:.2f} ms{' (step)' if it % 2 == 0 else ''}")
        if it % 2 == 0 and step % 100 == 0:
            v = run.loss[i] + 0.06
            out.append(f"iter {it}: val loss {v:.4f}, val time: 3412.08 ms")
            val = f"{v:.3f}"
    out.append(f"Final evaluation | val loss: {run.loss[-1] + 0.06:.3f} | val ppl: 4.113")
    return "\n".join(out) + "\n"


FIXTURES = [
    Spec("litgpt_pretrain__healthy.log", "litgpt", PRE, "step", "loss train", pretrain, points=500, interval=10,
         seed=701, notes="'Epoch 1 | iter N step M | loss train: X, val: n/a | ...'; iter = 4*step; val becomes a number after evals"),
    Spec("litgpt_pretrain__spike.log", "litgpt", PRE, "step", "loss train", pretrain, points=450, interval=10,
         seed=702, events=(Event(EventKind.SPIKE, 0.6),), notes="spike; the line also carries 'val: X.XXX' (stale)"),
    Spec("litgpt_finetune__level_shift.log", "litgpt", FT, "iter", "loss train", finetune, points=675, interval=1,
         first=1, seed=703, events=(Event(EventKind.LEVEL_SHIFT, 0.5),),
         notes="finetune: one line per iteration, two lines per optimizer step (only the 2nd says '(step)'); iter is the "
               "unique counter; epoch restarts every 250 iters"),
]
