"""Vision-style trainers: timm, detectron2, DeiT's MetricLogger, mmengine (epoch x batch counters, running averages).

Formats taken from:
- github.com/huggingface/pytorch-image-models @ aa4b5850c1543fa488abf260f18390eda46cf85d: train.py ``Train: {epoch}
  [{update_idx:>4d}/{updates_per_epoch} ({pct:>3.0f}%)]  Loss: {now:#.3g} ({avg:#.3g})  Time: {:.3f}s, {:>7.2f}/s
  ({:.3f}s, {:>7.2f}/s)  LR: {lr:.3e}  Data: {:.3f} ({:.3f})``; timm/utils/log.py prints INFO as the bare message.
- github.com/facebookresearch/detectron2 @ 02b5c4e295e990042a714712c21dc79b731e8833: detectron2/utils/events.py
  ``CommonMetricPrinter`` (`` eta: {eta}  iter: {iter}  {k}: {median:.4g} ...  time: {:.4f}  last_time: ...
  lr: {:.5g}  max_mem: {:.0f}M``; iteration 0-based, every 20), detectron2/utils/logger.py coloured prefix
  ``[%(asctime)s %(name)s]: `` (green, ``%m/%d %H:%M:%S``), engine/train_loop.py ``FloatingPointError: Loss became
  infinite or NaN at iteration={it}!``.
- github.com/facebookresearch/deit @ 7e160fe43f0252d17191b71cbb5826254114ea5b: utils.py ``MetricLogger.log_every``
  (``Epoch: [e]  [ i/N]  eta: ..  lr: {:.6f}  loss: {median:.4f} ({global_avg:.4f})  time: ..  data: ..  max mem: ..``,
  print_freq 10, ``Total time``), engine.py ``Loss is {}, stopping training`` and ``Averaged stats:``.
- github.com/open-mmlab/mmengine @ 254342938d9bde1775c39ea7d5181c5d294026c4: mmengine/runner/log_processor.py
  (``Epoch(train)  [e][ i/N]  lr: {:.4e}  eta: ..  time: {:.4f}  data_time: {:.4f}  memory: M  grad_norm: ..  loss: {:.4f}
  ...``, right-aligned counters) and mmengine/logging/logger.py ``MMFormatter`` (``%(asctime)s - %(name)s - INFO -
  %(message)s``, INFO underlined/white via termcolor on a terminal, ``%m/%d %H:%M:%S``).
"""

from __future__ import annotations

import math
from datetime import timedelta

from evals.console.curve import Event, EventKind
from evals.console.fixture import Clock, Run, Spec

TIMM = "github.com/huggingface/pytorch-image-models train.py train_one_epoch (aa4b5850c1543fa488abf260f18390eda46cf85d)"
D2 = "github.com/facebookresearch/detectron2 detectron2/utils/events.py CommonMetricPrinter (02b5c4e295e990042a714712c21dc79b731e8833)"
DEIT = "github.com/facebookresearch/deit utils.py MetricLogger + engine.py (7e160fe43f0252d17191b71cbb5826254114ea5b)"
MMENGINE = "github.com/open-mmlab/mmengine mmengine/runner/log_processor.py + logging/logger.py (254342938d9bde1775c39ea7d5181c5d294026c4)"


def _ep(step: int, per: int) -> tuple[int, int]:
    """(0-based epoch, 0-based index within it) of a 0-based global index."""
    return step // per, step % per


def timm(run: Run) -> str:
    """timm train.py: ``Train: e [ idx/N ( p%)]  Loss: now (avg) ...``; step = epoch*N + idx."""
    per = 1250
    out = ["Training with a single process on 1 device (cuda:0).", "Model vit_base_patch16_224 created, param count:86567656",
           "Using native Torch AMP. Training in mixed precision.", "Scheduled epochs: 300. LR stepped per epoch."]
    avg = None
    epoch = 0
    for i in range(run.n):
        e, k = _ep(run.steps[i], per)
        if e != epoch:
            out.append(f"Test: [   0/48]  Time: 1.021 (1.021)  Loss:  {run.loss[i] - 0.2:>6.3f} ({run.loss[i] - 0.2:>6.3f})  Acc@1: 41.4062 (41.4062)  Acc@5: 66.7969 (66.7969)")
            out.append(f"Test: [  48/48]  Time: 0.212 (0.243)  Loss:  {run.loss[i] - 0.2:>6.3f} ({run.loss[i] - 0.21:>6.3f})  Acc@1: 40.0000 (42.1180)  Acc@5: 70.0000 (67.0221)")
            out.append(f"Current checkpoints:\n ('./output/train/20260302-091405-vit_base_patch16_224-224/checkpoint-{epoch}.pth.tar', {42.118 + e:.3f})\n")
            epoch, avg = e, None
        v = run.loss[i]
        avg = v if avg is None else 0.8 * avg + 0.2 * v
        now = run.show(i, f"{v:#.3g}")
        t = 0.412 * (1 + run.rng.uniform(-.02, .02))
        out.append(f"Train: {e} [{k:>4d}/{per} ({100. * (k + 1) / per:>3.0f}%)]  Loss: {now} ({avg:#.3g})  "
                   f"Time: {t:.3f}s, {1024 / t:>7.2f}/s  ({0.415:.3f}s, {1024 / 0.415:>7.2f}/s)  LR: {run.lr(run.steps[i], 1e-3):.3e}  "
                   f"Data: {0.012:.3f} ({0.015:.3f})")
    return "\n".join(out) + "\n"


def detectron2(run: Run) -> str:
    """detectron2 train_net.py: coloured ``[date d2.utils.events]:`` prefix; crash on a non-finite loss."""
    clock = Clock(run.rng)
    pre = lambda name, dt=0.01: f"\x1b[32m[{clock.tick(dt):%m/%d %H:%M:%S} {name}]: \x1b[0m"
    out = [pre("detectron2") + "Rank of current process: 0. World size: 8",
           pre("d2.engine.defaults") + "Model:\nGeneralizedRCNN(\n  (backbone): FPN(...)\n)",
           pre("d2.data.build") + "Using training sampler TrainingSampler",
           pre("d2.engine.train_loop") + "Starting training from iteration 0"]
    for i in range(run.n):
        it = run.steps[i]
        v = run.loss[i]
        if math.isnan(v):
            out += ["ERROR [03/02 11:02:17 d2.engine.train_loop]: Exception during training:", "Traceback (most recent call last):",
                    '  File "/detectron2/detectron2/engine/train_loop.py", line 155, in train', "    self.run_step()",
                    '  File "/detectron2/detectron2/engine/train_loop.py", line 410, in _write_metrics',
                    "    raise FloatingPointError(",
                    f"FloatingPointError: Loss became infinite or NaN at iteration={it - 7}!",
                    "loss_dict = {'loss_cls': nan, 'loss_box_reg': nan, 'loss_rpn_cls': 0.1031, 'loss_rpn_loc': 0.0815}"]
            run.crash(it - 7)
            run.event_steps = [(k.value, it - 7 if k is EventKind.NONFINITE else run.steps[j]) for k, j in run.onsets()]
            break
        tot = run.show(i, f"{v:.4g}")
        parts = [f"total_loss: {tot}", f"loss_cls: {0.42 * v:.4g}", f"loss_box_reg: {0.35 * v:.4g}", f"loss_rpn_cls: {0.13 * v:.4g}",
                 f"loss_rpn_loc: {0.10 * v:.4g}"]
        eta = timedelta(seconds=int((run.total - it) * 0.41))
        out.append(pre("d2.utils.events", 0.41 * run.spec.interval) + f" eta: {eta}  iter: {it}  " + "  ".join(parts) +
                   f"    time: {0.4123 + run.rng.uniform(-.01, .01):.4f}  last_time: {0.4101:.4f}  data_time: {0.0123:.4f}  "
                   f"last_data_time: {0.0101:.4f}   lr: {run.lr(it, 0.02):.5g}  max_mem: 5123M")
        if (it + 1) % 5000 == 0:
            out.append(pre("fvcore.common.checkpoint") + f"Saving checkpoint to ./output/model_{it:07d}.pth")
    return "\n".join(out) + "\n"


def deit(run: Run) -> str:
    """DeiT main.py: MetricLogger lines ``Epoch: [e]  [ i/N]  ...``; a NaN prints ``Loss is nan, stopping training``."""
    per = 1250
    out = ["Not using distributed mode", "Namespace(batch_size=256, epochs=300, model='deit_small_patch16_224', ...)",
           "Creating model: deit_small_patch16_224", "number of params: 22050664", "Start training for 300 epochs"]
    epoch = -1
    for i in range(run.n):
        e, k = _ep(run.steps[i], per)
        v = run.loss[i]
        if e != epoch:
            if epoch >= 0:
                out.append(f"Epoch: [{epoch}] Total time: 0:08:35 (0.4121 s / it)")
                out.append(f"Averaged stats: lr: {run.lr(run.steps[i], 5e-4):.6f}  loss: {run.loss[i - 1]:.4f} ({run.loss[i - 1]:.4f})")
                out.append(f"* Acc@1 {40.1 + epoch:.3f} Acc@5 {65.2 + epoch:.3f} loss {run.loss[i - 1] - 0.3:.3f}")
            epoch = e
        if math.isnan(v):
            out.append("Loss is nan, stopping training")
            run.crash(run.steps[i])
            break
        loss = run.show(i, f"{v:.4f}")
        eta = timedelta(seconds=int((per - k) * 0.412))
        out.append(f"Epoch: [{e}]  [{k:{len(str(per))}d}/{per}]  eta: {eta}  lr: {run.lr(run.steps[i], 5e-4):.6f}  "
                   f"loss: {loss} ({v + 0.05:.4f})  time: {0.4121 + run.rng.uniform(-.01, .01):.4f}  data: 0.0008  max mem: 15123")
    return "\n".join(out) + "\n"


def mmengine(run: Run) -> str:
    """An mmdet/mmpretrain run on mmengine: epoch-based train lines with right-aligned counters."""
    clock = Clock(run.rng)
    per, max_epochs = 1800, 12
    info = "\x1b[4m\x1b[97mINFO\x1b[0m"
    pre = lambda dt=0.01: f"{clock.tick(dt):%m/%d %H:%M:%S} - mmengine - {info} - "
    out = [pre() + "\n------------------------------------------------------------\nSystem environment:\n    sys.platform: linux\n"
           "    CUDA available: True\n------------------------------------------------------------\n",
           pre() + "Checkpoints will be saved to /work_dirs/rtmdet_l_8xb32-300e_coco.",
           pre() + "Loads checkpoint by local backend from path: pretrain/cspnext-l.pth"]
    for i in range(run.n):
        g = run.steps[i]
        e, k = (g - 1) // per + 1, (g - 1) % per + 1
        v = run.loss[i]
        loss = run.show(i, f"{v:.4f}")
        eta = timedelta(seconds=int((per * max_epochs - g) * 0.35))
        out.append(pre(0.35 * run.spec.interval) + f"Epoch(train) {f'[{e}]'.rjust(len(str(max_epochs)) + 3)}[{str(k).rjust(len(str(per)))}/{per}]  "
                   f"lr: {run.lr(g, 4e-3):.4e}  eta: {eta}  time: {0.35 + run.rng.uniform(-.01, .01):.4f}  data_time: 0.0125  "
                   f"memory: 21403  grad_norm: {run.gnorm(i):.4f}  loss: {loss}  loss_cls: {0.55 * v:.4f}  loss_bbox: {0.45 * v:.4f}")
        if k == per:
            out.append(pre() + "Exp name: rtmdet_l_8xb32-300e_coco_20260302_091405")
            out.append(pre() + f"Saving checkpoint at {e} epochs")
    return "\n".join(out) + "\n"


FIXTURES = [
    Spec("timm__healthy.log", "timm", TIMM, "epoch*batch", "Loss", timm, points=400, interval=50, first=0, seed=1301,
         notes="'Train: E [ idx/1250 ( p%)]  Loss: now (avg)' (#.3g: 3 significant digits); idx restarts each epoch; "
               "step = E*1250 + idx; Test: lines carry a different Loss"),
    Spec("timm__spike.log", "timm", TIMM, "epoch*batch", "Loss", timm, points=400, interval=50, first=0, seed=1302,
         events=(Event(EventKind.SPIKE, 0.6),), notes="spike"),
    Spec("detectron2__healthy.log", "detectron2", D2, "iter", "total_loss", detectron2, points=225, interval=20, first=19,
         seed=1303, notes="green ANSI prefix; ' eta: ..  iter: 19  total_loss: X  loss_cls: ..' (iteration 0-based, every 20; "
                          "values are window medians, {:.4g})"),
    Spec("detectron2__nan_crash.log", "detectron2", D2, "iter", "total_loss", detectron2, points=300, interval=20, first=19,
         seed=1304, events=(Event(EventKind.NONFINITE, 0.8),),
         notes="dies with 'FloatingPointError: Loss became infinite or NaN at iteration=N!' between two log lines"),
    Spec("deit__nan.log", "DeiT MetricLogger", DEIT, "epoch*batch", "loss", deit, points=400, interval=10, first=0, seed=1305,
         events=(Event(EventKind.NONFINITE, 0.7),),
         notes="'Epoch: [e]  [ i/1250]  eta: ..  lr: ..  loss: median (global_avg)' every 10 iters; step = e*1250 + i; "
               "a NaN prints 'Loss is nan, stopping training' (no step: the one after the last line) and exits"),
    Spec("deit__healthy.log", "DeiT MetricLogger", DEIT, "epoch*batch", "loss", deit, points=200, interval=10, first=0,
         seed=1307, notes="healthy; epoch summary lines 'Averaged stats:' and '* Acc@1 ..' between epochs"),
    Spec("mmengine__healthy.log", "mmengine", MMENGINE, "epoch*batch", "loss", mmengine, points=300, interval=50, seed=1306,
         notes="'Epoch(train)  [e][ i/1800]  lr: ..  eta: ..  loss: X  loss_cls: ..' with termcolor INFO; step = (e-1)*1800 + i"),
]
