"""Long-standing research trainers: GPT-NeoX, OpenNMT-py, open_clip.

Formats taken from:
- github.com/EleutherAI/gpt-neox @ ea7aefd8f8e183256992d9fede4d7c71a46d67a5: megatron/logging.py ``training_log``
  (`` samples/sec: {:.3f} | iteration {:8d}/{:8d} | elapsed time per iteration (ms): {:.1f} | learning rate: {:.3E} |
  approx flops per GPU: {human} | lm_loss: {:.6E} | loss scale: {:.1f} | number of skipped iterations: {:3d} | number of
  nan iterations: {:3d} |``; loss scale only with fp16).
- github.com/OpenNMT/OpenNMT-py @ 97111d97551c24857076a4102eabdb468b35cff4: onmt/utils/statistics.py ``output``
  (``Step {step}/{total:5d}; acc: %2.1f; ppl: %5.1f; xent: %2.1f; lr: %7.5f; sents: %7.0f; bsz: ..; %3.0f/%3.0f tok/s;
  %6.0f sec;``), onmt/utils/logging.py ``[%(asctime)s %(levelname)s] %(message)s``, ``Validation perplexity: %g``,
  ``Saving checkpoint %s_step_%d.pt``.
- github.com/mlfoundations/open_clip @ 89fb801f1e6087880e951fc8354b8a2077b79c6d: src/open_clip_train/train.py (``Train Epoch:
  {epoch} [{n:>{d}}/{N} ({pct:.0f}%)] Data (t): {:.3f} Batch (t): {:.3f}, {:#g}/s, {:#g}/s/gpu LR: {:5f} Logit Scale:
  {:.3f} Contrastive_loss: {val:#.5g} ({ema:#.5g})``) and src/open_clip_train/logger.py ``%(asctime)s | %(levelname)s |
  %(name)s | %(message)s`` (``%Y-%m-%d,%H:%M:%S``).
"""

from __future__ import annotations

import math

from evals.console.curve import Event, EventKind
from evals.console.fixture import Clock, Run, Spec

NEOX = "github.com/EleutherAI/gpt-neox megatron/logging.py training_log (ea7aefd8f8e183256992d9fede4d7c71a46d67a5)"
ONMT = "github.com/OpenNMT/OpenNMT-py onmt/utils/statistics.py Statistics.output (97111d97551c24857076a4102eabdb468b35cff4)"
CLIP = "github.com/mlfoundations/open_clip src/open_clip_train/train.py (89fb801f1e6087880e951fc8354b8a2077b79c6d)"


def neox(run: Run, fp16: bool) -> str:
    """GPT-NeoX deepy.py train output."""
    out = ["NeoXArgs.from_ymls() ['configs/1-3B.yml', 'configs/local_setup.yml']", "INFO:root:NeoXArgs.calculate_derived() Total number of GPUs determined to be: 8",
           "-------------------- arguments --------------------", "  attention_config ................ ['global', 'global']...........updated",
           f"  fp16 ............................ {{'enabled': {fp16}}}..updated", f"  train_iters ..................... {run.total}........updated",
           "---------------- end of arguments ----------------", "> building GPT2BPETokenizer tokenizer ...", "building GPT2 model ...",
           "Configuring Optimizer type: Adam with params: {'lr': 0.0002, 'betas': [0.9, 0.95], 'eps': 1e-08}", "Done with setup ...", "training ..."]
    scale = 65536.0
    for i in range(run.n):
        it = run.steps[i]
        ms = 1834.2 * (1 + run.rng.uniform(-.02, .02))
        loss = run.show(i, f"{run.loss[i]:.6E}")
        line = (f" samples/sec: {512 / ms * 1000:.3f} | iteration {it:8d}/{run.total:8d} | elapsed time per iteration (ms): {ms:.1f} | "
                f"learning rate: {run.lr(it, 2e-4):.3E} | approx flops per GPU: {148.3 * 1834.2 / ms:.1f}TFLOPS | lm_loss: {loss} |")
        if fp16:
            line += f" loss scale: {scale:.1f} |"
        line += " number of skipped iterations:   0 | number of nan iterations:   0 |"
        out.append(line)
        if it % 1000 == 0:
            out.append("-" * 40)
            out.append(f" validation results at iteration {it} | lm_loss value: {run.loss[i] + .04:.6E} | lm_loss_ppl value: "
                       f"{math.exp(run.loss[i] + .04):.6E} | ")
            out.append("-" * 40)
    return "\n".join(out) + "\n"


def onmt(run: Run) -> str:
    """onmt_train stdout: ``[date INFO] Step N/M; acc: ..; ppl: ..; xent: X.X; ...``."""
    clock = Clock(run.rng)
    pre = lambda dt=0.01: f"[{clock.tick(dt):%Y-%m-%d %H:%M:%S},{clock.t.microsecond // 1000:03d} INFO] "
    out = [pre() + "Missing transforms field for corpus_1 data, set to default: [].", pre() + "Parsed 2 corpora from -data.",
           pre() + "encoder: 44517376", pre() + "decoder: 51260416", pre() + "* number of parameters: 95777792",
           pre() + "Starting training on GPU: [0]", pre() + "Start training loop and validate every 5000 steps..."]
    for i in range(run.n):
        s = run.steps[i]
        v = run.loss[i]
        xent = run.show(i, "%2.1f" % v)
        ppl = math.exp(min(v, 100)) if math.isfinite(v) else float("nan")
        acc = max(1.0, 100 * math.exp(-v / 2.2))
        out.append(pre(0.31 * run.spec.interval) + "Step %s; acc: %2.1f; ppl: %5.1f; xent: %s; lr: %7.5f; sents: %7.0f; bsz: %4.0f/%4.0f/%2.0f; "
                   "%3.0f/%3.0f tok/s; %6.0f sec;" % ("%2d/%5d" % (s, run.total), acc, ppl, xent, run.lr(s, 2.0) / 1000, 152311, 1432, 1521, 64,
                                                     51234, 54121, s * 0.31))
        if s % 5000 == 0:
            out.append(pre() + "Validation perplexity: %g" % (ppl * 1.1))
            out.append(pre() + "Validation accuracy: %g" % acc)
            out.append(pre() + "Saving checkpoint models/run_step_%d.pt" % s)
    return "\n".join(out) + "\n"


def open_clip(run: Run) -> str:
    """open_clip training stdout: ``Train Epoch: e [n/N (p%)] ... Contrastive_loss: val (ema)``; step = epoch*steps + batch."""
    clock = Clock(run.rng)
    pre = lambda dt=0.01: f"{clock.tick(dt):%Y-%m-%d,%H:%M:%S} | INFO | open_clip_train.train | "
    per, bs = 200, 4096
    out = [f"{clock.t:%Y-%m-%d,%H:%M:%S} | INFO | root | Running with a single process. Device cuda:0.",
           f"{clock.t:%Y-%m-%d,%H:%M:%S} | INFO | root | Model: CLIP(...)", f"{clock.t:%Y-%m-%d,%H:%M:%S} | INFO | root | Start epoch 0"]
    ema = None
    epoch = 0
    for i in range(run.n):
        g = run.steps[i]
        e, b = (g - 1) // per, (g - 1) % per + 1
        if e != epoch:
            out.append(f"{clock.t:%Y-%m-%d,%H:%M:%S} | INFO | root | Start epoch {e}")
            epoch = e
        v = run.loss[i]
        ema = v if ema is None or not math.isfinite(ema) else 0.9 * ema + 0.1 * v
        val = run.show(i, f"{v:#.5g}")
        n = b * bs
        out.append(pre(1.1 * run.spec.interval) + f"Train Epoch: {e} [{n:>{len(str(per * bs))}}/{per * bs} ({100.0 * b / per:.0f}%)] "
                   f"Data (t): 0.112 Batch (t): {1.104 + run.rng.uniform(-.01, .01):.3f}, {3710.15:#g}/s, {463.769:#g}/s/gpu "
                   f"LR: {run.lr(g, 5e-4):5f} Logit Scale: {min(100.0, 14.3 + g * 0.01):.3f} Contrastive_loss: {val} ({ema:#.5g})")
    return "\n".join(out) + "\n"


FIXTURES = [
    Spec("gpt_neox__bf16_healthy.log", "GPT-NeoX", NEOX, "iteration", "lm_loss", lambda r: neox(r, False), points=225,
         interval=10, seed=1501, notes="Megatron-like pipes with 'lm_loss' (underscore) first after flops; bf16: no loss scale field"),
    Spec("gpt_neox__fp16_spike.log", "GPT-NeoX", NEOX, "iteration", "lm_loss", lambda r: neox(r, True), points=225,
         interval=10, seed=1502, events=(Event(EventKind.SPIKE, 0.5),), notes="fp16: constant 'loss scale: 65536.0'; spike"),
    Spec("opennmt__healthy.log", "OpenNMT-py", ONMT, "step", "xent", onmt, points=400, interval=50, seed=1503,
         notes="'Step N/M; acc: ..; ppl: ..; xent: 2.3; ...' (xent with ONE decimal, ppl beside it); Validation perplexity lines"),
    Spec("opennmt__level_shift.log", "OpenNMT-py", ONMT, "step", "xent", onmt, points=400, interval=50, seed=1504,
         events=(Event(EventKind.LEVEL_SHIFT, 0.55),), notes="level shift of ~1.2 nats (xent printed to 0.1)"),
    Spec("open_clip__healthy.log", "open_clip", CLIP, "epoch*batch", "Contrastive_loss", open_clip, points=150, interval=10,
         seed=1506, read_with={"step_key": "/4096"}, warns="it may count samples",
         notes="healthy; 'Start epoch N' lines between epochs; a sample counter read with --step-key '/4096'"),
    Spec("open_clip__spike.log", "open_clip", CLIP, "epoch*batch", "Contrastive_loss", open_clip, points=300, interval=10,
         seed=1505, events=(Event(EventKind.SPIKE, 0.45),), read_with={"step_key": "/4096"}, warns="it may count samples",
         notes="'Train Epoch: e [n/N (p%)]' counts samples (batch_count * batch_size * world_size), not steps; the text "
               "does not hold the batch size (4096): read with --step-key '/4096'; step = e*200 + batch; "
               "'Contrastive_loss: val (ema)' #.5g"),
]
