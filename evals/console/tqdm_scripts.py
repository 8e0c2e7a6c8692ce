"""Scripts whose only console record is a tqdm bar: Colossal-AI examples and ultralytics.

Formats taken from:
- github.com/hpcaitech/ColossalAI @ 65a8653ef9aced5cffd46c99c36091932c096548: examples/language/gpt/hybridparallelism/finetune.py
  ``train_epoch``: ``tqdm(range(total_step), desc=f"Epoch [{epoch + 1}/{NUM_EPOCHS}]")`` and ``pbar.set_postfix({"loss":
  loss.item()})`` every step (tqdm ``format_num``: 3 significant digits); one bar per epoch, closed with a newline.
- github.com/ultralytics/ultralytics (v8.3) ultralytics/engine/trainer.py ``_do_train``: the header
  ``("\\n" + "%11s" * (4 + len(loss_names))) % ("Epoch", "GPU_mem", *loss_names, "Instances", "Size")`` (classification
  trainer: loss_names ``["loss"]``) and ``pbar.set_description(("%11s" * 2 + "%11.4g" * (2 + n)) % (f"{epoch + 1}/{epochs}",
  f"{mem:.3g}G", *tloss, instances, size))`` with ``tloss`` the epoch's running mean; bar ``{l_bar}{bar:10}{r_bar}``.
"""

from __future__ import annotations

from evals.console.curve import Event, EventKind
from evals.console.fixture import Run, Spec
from evals.console.text import tqdm_meter

COLOSSAL = "github.com/hpcaitech/ColossalAI examples/language/gpt/hybridparallelism/finetune.py (65a8653ef9aced5cffd46c99c36091932c096548)"
ULTRA = "github.com/ultralytics/ultralytics ultralytics/engine/trainer.py _do_train + models/yolo/classify/train.py (v8.3)"


def _fmt_num(v: float) -> str:
    f = f"{v:.3g}".replace("+0", "+").replace("-0", "-")
    return f if len(f) < len(str(v)) else str(v)


def colossal(run: Run) -> str:
    """Colossal-AI example: one tqdm bar per epoch, loss in the postfix, every step drawn."""
    per, epochs = 250, max(1, (run.total + 249) // 250)
    head = ["[03/02/26 09:14:05] INFO     colossalai - colossalai - INFO: /opt/colossalai/initialize.py:75 launch", "                    INFO     colossalai - colossalai - INFO: Distributed environment is initialized, world size: 8"]
    parts = []
    epoch = -1
    for i in range(run.n):
        g = run.steps[i]
        e, k = (g - 1) // per, (g - 1) % per + 1
        if e != epoch:
            if epoch >= 0:
                parts.append("\n")
            parts.append(f"\rEpoch [{e + 1}/{epochs}]:   0%|          | 0/{per} [00:00<?, ?it/s]")
            epoch = e
        loss = run.show(i, _fmt_num(run.loss[i]))
        parts.append("\r" + tqdm_meter(k, per, k * 0.31, desc=f"Epoch [{e + 1}/{epochs}]", postfix=f"loss={loss}"))
    parts.append("\n")
    return "\n".join(head) + "\n" + "".join(parts)


def ultralytics(run: Run) -> str:
    """ultralytics classify training: header line per epoch, then the bar whose description carries the mean loss."""
    per, epochs = 200, max(1, (run.total + 199) // 200)
    head = ["Ultralytics 8.3.40 🚀 Python-3.11.10 torch-2.5.1+cu124 CUDA:0 (NVIDIA A100-SXM4-80GB, 81051MiB)",
            "engine/trainer: task=classify, mode=train, model=yolo11n-cls.pt, data=imagenet, epochs=%d, imgsz=224" % epochs,
            "Image sizes 224 train, 224 val", "Using 8 dataloader workers", "Logging results to runs/classify/train",
            "Starting training for %d epochs..." % epochs]
    parts = []
    epoch = -1
    for i in range(run.n):
        g = run.steps[i]
        e, k = (g - 1) // per, (g - 1) % per + 1
        if e != epoch:
            if epoch >= 0:
                parts.append(f"\n               classes   top1_acc   top5_acc: 100%|██████████| 50/50 [00:04<00:00, 11.21it/s]\n"
                             f"                   all      {0.41 + 0.01 * e:.3f}      {0.67 + 0.01 * e:.3f}\n")
            parts.append(("\n" + "%11s" * 5) % ("Epoch", "GPU_mem", "loss", "Instances", "Size") + "\n")
            parts.append(f"  0%|          | 0/{per} [00:00<?, ?it/s]")
            epoch = e
        desc = ("%11s" * 2 + "%11.4g" * 3) % (f"{e + 1}/{epochs}", "3.41G", run.loss[i], 256, 224)
        run.show(i, desc.split()[2])
        parts.append("\r" + tqdm_meter(k, per, k * 0.18, desc=desc))
    parts.append("\n")
    return "\n".join(head) + "\n" + "".join(parts)


FIXTURES = [
    Spec("colossalai__healthy.log", "Colossal-AI", COLOSSAL, "epoch*batch", "loss", colossal, points=500, interval=1, first=1,
         seed=1601, notes="'Epoch [1/2]:  45%|..| 113/250 [..., loss=2.34]' redrawn every step; one \\r line per epoch; step = e*250 + n"),
    Spec("colossalai__divergence.log", "Colossal-AI", COLOSSAL, "epoch*batch", "loss", colossal, points=500, interval=1,
         first=1, seed=1602, events=(Event(EventKind.DIVERGENCE, 0.7),), notes="divergence"),
    Spec("ultralytics__classify_healthy.log", "ultralytics", ULTRA, "epoch*batch", "loss", ultralytics, points=300,
         interval=2, seed=1604, notes="healthy; per-epoch header, bar and validation lines"),
    Spec("ultralytics__classify_spike.log", "ultralytics", ULTRA, "epoch*batch", "loss", ultralytics, points=600, interval=2,
         seed=1603, events=(Event(EventKind.SPIKE, 0.55),),
         notes="a '      Epoch    GPU_mem       loss  Instances       Size' header per epoch, then the bar whose description is "
               "'       3/6      3.41G      2.345        256        224' (%11.4g); counter restarts each epoch; step = e*200 + n"),
]
