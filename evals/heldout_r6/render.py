"""Render the round-6 held-out trainer consoles in evals/heldout_r6/console/ (seeded, deterministic).

    python evals/heldout_r6/render.py       # rewrites console/*.log and console/MANIFEST.json

Five trainers that none of the other corpora (tests/data/console/, evals/heldout/console/,
evals/heldout_r5/console/) covers. Each ``render_<trainer>`` re-expresses the per-step print of the
cited source file with Python formatting (no code copied), adds start-up output, a synthetic curve and
at most one planted event printed the way that trainer prints it. Lines around the per-step print that
were not checked against source are called "approximate" in the manifest notes.
Helpers come from the first held-out renderer (Fixture, lm_curve, ts, write_corpus) and the tuning
corpus' text helpers (TqdmStream: tqdm's meter and ``\\r`` redraws).
"""
# ruff: noqa: E501 - rendered/printed lines are kept whole, as the trainer or table prints them
from __future__ import annotations

import math
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "heldout"))
sys.path.insert(0, str(HERE.parent.parent))
from render import Fixture, lm_curve, ts, write_corpus  # noqa: E402

from evals.console.text import TqdmStream  # noqa: E402

OUT = HERE / "console"

SOURCES = {
    "diffusers": "github.com/huggingface/diffusers examples/text_to_image/train_text_to_image.py (024c4376fb19caa85275c038f071b6e1446a5cad; tqdm desc='Steps', progress_bar.set_postfix(step_loss=..., lr=...)) + tqdm/std.py set_postfix/format_num (sorted keys, '{:.3g}')",
    "yolov5": "github.com/ultralytics/yolov5 train.py (5de4e25d68a2b6c3f9a51f28a1a26accb86dc318; header ('%11s' * 7) % ('Epoch', 'GPU_mem', 'box_loss', 'obj_loss', 'cls_loss', 'Instances', 'Size'); pbar.set_description(('%11s' * 2 + '%11.4g' * 5) % (f'{epoch}/{epochs - 1}', mem, *mloss, ...)); bar_format '{l_bar}{bar:10}{r_bar}') + val.py summary line ('%22s' + '%11i' * 2 + '%11.3g' * 4)",
    "sb3_ppo": "github.com/DLR-RM/stable-baselines3 stable_baselines3/common/logger.py HumanOutputFormat.write (00dc23b01ac22eab0cb58a4848a78deda6974f01; sorted keys, 'tag/' rows, floats '{:<8.3g}', dashed box) + stable_baselines3/ppo/ppo.py train() records",
    "imagenet_ddp": "github.com/pytorch/examples imagenet/main.py train() (493da9304e56ff5160f78d01a54992db35df2a98; ProgressMeter prefix 'Epoch: [E]', '[{:4d}/5005]', AverageMeter 'Time :6.3f', 'Data :6.3f', 'Loss :.4e', 'Acc@1 :6.2f', 'Acc@5 :6.2f', '\\t'-joined; progress.display(i + 1) every print_freq=10 on every process of --multiprocessing-distributed) + validate() 'Test: ' lines and ' * Acc@1 ... Acc@5 ...'",
    "chainer_espnet": "github.com/chainer/chainer chainer/training/extensions/print_report.py PrintReport (5c21f7b7bbbe5f3f5413b24565b6addb6d2a5130; header '{:W}' joined by two spaces, rows '{:<Wg}  ', ESC[J before each row, blank cells for unreported keys) with ESPnet1's report keys (espnet/asr/pytorch_backend/asr.py)",
}


def render_diffusers() -> tuple[Fixture, dict]:
    """diffusers text-to-image fine-tune: one tqdm 'Steps' bar whose postfix carries lr and the step's loss."""
    rng, fx = random.Random(601), Fixture("diffusers_text_to_image__sd15_nan.log")
    t = [0.0]

    def log(msg: str, name: str = "__main__") -> None:
        t[0] += 0.4
        fx.line(f"{ts(t[0]):%m/%d/%Y %H:%M:%S} - INFO - {name} - {msg}")

    log("Distributed environment: NO\nNum processes: 1\nProcess index: 0\nLocal process index: 0\nDevice: cuda\n\nMixed precision type: fp16\n")
    log("***** Running training *****")
    log("  Num examples = 833")
    log("  Num Epochs = 5")
    log("  Instantaneous batch size per device = 4")
    log("  Total train batch size (w. parallel, distributed & accumulation) = 4")
    log("  Gradient Accumulation steps = 1")
    log("  Total optimization steps = 1000")
    total, nan_from = 1000, 731
    bar = TqdmStream(total, desc="Steps", sec_per_it=1.21)
    lr = 1e-05
    for step in range(1, total + 1):
        # diffusion MSE depends on the sampled timestep: a heavy-tailed, stationary noise around ~0.1
        loss = "nan" if step >= nan_from else f"{0.11 * math.exp(rng.gauss(0, 0.55)):.3g}"
        bar.draw(step)  # progress_bar.update(1): redrawn with the previous step's postfix
        bar.draw(step, postfix=f"lr={lr:.3g}".replace("e-0", "e-") + f", step_loss={loss}")
        fx.point(step, loss)
        if step % 500 == 0:
            bar.write(f"{ts(t[0] + step * 1.21):%m/%d/%Y %H:%M:%S} - INFO - accelerate.accelerator - Saving current state to sd-model-finetuned/checkpoint-{step}")
    bar.close()
    fx.raw(bar.text())
    log("Saving model to sd-model-finetuned")
    meta = dict(writer="diffusers examples/text_to_image/train_text_to_image.py", step_key="n (bar count, = global_step)", loss_key="step_loss",
                events=[{"kind": "nonfinite", "step": nan_from}],
                notes="One tqdm bar 'Steps: P%|...| n/1000 [...,  1.21s/it, lr=1e-5, step_loss=0.107]' redrawn with \\r; each step is drawn twice "
                      "(update(1) with the previous postfix, then set_postfix with the new one). step_loss is one batch's MSE: heavy-tailed noise "
                      "around 0.1 with no trend (healthy until the NaN). From step 731 the fp16 run prints step_loss=nan and keeps going. "
                      "Checkpoint lines via tqdm.write are approximate; start-up lines approximate.")
    return fx, meta


def render_yolov5() -> tuple[Fixture, dict]:
    """YOLOv5 train.py: a header row per epoch, then a tqdm bar whose description holds the epoch's running-mean losses."""
    rng, fx = random.Random(602), Fixture("yolov5__custom_nan.log")
    fx.line("train: weights=yolov5s.pt, cfg=, data=data/custom.yaml, hyp=data/hyps/hyp.scratch-low.yaml, epochs=30, batch_size=16, imgsz=640, rect=False, resume=False")
    fx.line("YOLOv5 🚀 v7.0-230-g53efd07 Python-3.10.12 torch-2.1.0+cu121 CUDA:0 (NVIDIA GeForce RTX 3090, 24260MiB)")
    fx.line("")
    fx.line("hyperparameters: lr0=0.01, lrf=0.01, momentum=0.937, weight_decay=0.0005, warmup_epochs=3.0, box=0.05, cls=0.5, obj=1.0")
    fx.line("Starting training for 30 epochs...")
    epochs, nb = 30, 60
    nan_epoch, nan_batch = 17, 23  # 0-based epoch, 1-based batch whose running mean turns nan
    base = lm_curve(rng, epochs * nb, 0.11, 0.035, 500.0, 0.0)
    for ep in range(epochs):
        fx.raw(("\n" + "%11s" * 7) % ("Epoch", "GPU_mem", "box_loss", "obj_loss", "cls_loss", "Instances", "Size") + "\n")
        bar = TqdmStream(nb, sec_per_it=0.41)
        parts: list[str] = []
        m = [0.0, 0.0, 0.0]
        for i in range(nb):
            k = ep * nb + i
            items = [base[k] * (1 + rng.gauss(0, 0.15)), 0.6 * base[k] * (1 + rng.gauss(0, 0.2)), 0.4 * base[k] * (1 + rng.gauss(0, 0.2))]
            m = [(mv * i + x) / (i + 1) for mv, x in zip(m, items, strict=True)]
            bad = (ep, i + 1) >= (nan_epoch, nan_batch)
            vals = ["nan"] * 3 if bad else ["%11.4g" % v for v in m]
            desc = ("%11s" * 2) % (f"{ep}/{epochs - 1}", "3.78G") + "".join(v.rjust(11) for v in vals) + "%11.4g%11.4g" % (rng.randint(20, 90), 640)
            bar.desc = desc
            bar.draw(i)       # set_description refreshes at the current count
            bar.draw(i + 1)   # the loop's update draws the next count with the same description
            fx.point(ep * nb + i + 1, vals[0].strip())
        bar.close()
        parts.append(bar.text())
        fx.raw("".join(parts))
        s = ("%22s" + "%11s" * 6) % ("Class", "Images", "Instances", "P", "R", "mAP50", "mAP50-95")
        vb = TqdmStream(4, desc=s, sec_per_it=0.3)
        vb.draw(4)
        vb.close()
        fx.raw(vb.text())
        bad_map = (ep, nb) >= (nan_epoch, nan_batch)
        mp = 0.0 if bad_map else min(0.95, 0.2 + ep * 0.025)
        fx.line(("%22s" + "%11i" * 2 + "%11.3g" * 4) % ("all", 128, 929, mp, mp * 0.9, mp * 0.85, mp * 0.55))
    fx.line("")
    fx.line("30 epochs completed in 0.412 hours.")
    meta = dict(writer="YOLOv5 train.py", step_key="epoch*batch", loss_key="box_loss (first loss column, an epoch-running mean)",
                events=[{"kind": "nonfinite", "step": nan_epoch * nb + nan_batch}],
                notes="Columns are named only by the header row printed before each epoch's bar; the bar's description holds epoch 'E/29', GPU_mem and "
                      "the running means of box/obj/cls loss over the epoch so far (reset each epoch), then Instances and Size (not losses). "
                      "Each batch is drawn twice (set_description at count i, loop update at i+1). 60 batches per epoch; step = epoch*60 + batch. "
                      "From epoch 17 batch 23 the losses print nan and stay nan (YOLOv5 keeps training); mAP goes to 0. Validation bars and 'all' rows follow each epoch. "
                      "Start-up lines approximate.")
    return fx, meta


def render_sb3_ppo() -> tuple[Fixture, dict]:
    """Stable-Baselines3 PPO: one dashed key/value box per rollout iteration (records over ~20 lines)."""
    rng, fx = random.Random(603), Fixture("sb3_ppo__lunarlander.log")
    fx.line("Using cuda device")
    fx.line("Wrapping the env with a `Monitor` wrapper")
    fx.line("Wrapping the env in a DummyVecEnv.")
    n_steps, iters = 2048, 120
    loss = lm_curve(rng, iters, 160.0, 12.0, 25.0, 0.18)

    def box(kv: dict[str, object]) -> None:
        key2str: dict[str, str] = {}
        tag = None
        for key, value in sorted(kv.items()):
            vs = f"{value:<8.3g}" if isinstance(value, float) else str(value)
            if key.find("/") > 0:
                tag = key[: key.find("/") + 1]
                key2str[tag] = ""
            if tag is not None and tag in key:
                key = "   " + key[len(tag):]
            key2str[key] = vs
        kw, vw = max(map(len, key2str)), max(map(len, key2str.values()))
        dashes = "-" * (kw + vw + 7)
        fx.line("\n".join([dashes] + [f"| {k}{' ' * (kw - len(k))} | {v}{' ' * (vw - len(v))} |" for k, v in key2str.items()] + [dashes]))

    elapsed = 0.0
    for it in range(1, iters + 1):
        elapsed += 2.05 + rng.random() * 0.2
        rew = -180.0 + 420.0 * (1 - math.exp(-it / 45)) + rng.gauss(0, 12)
        kv: dict[str, object] = {"rollout/ep_len_mean": 90.0 + 6 * it * (1 + rng.gauss(0, 0.05)), "rollout/ep_rew_mean": rew,
                                 "time/fps": int(n_steps * it / elapsed), "time/iterations": it, "time/time_elapsed": int(elapsed),
                                 "time/total_timesteps": n_steps * it}
        if it > 1:  # train() runs after the dump: the first box has no train/ section
            lv = loss[it - 2]
            kv.update({"train/approx_kl": 0.006 + rng.random() * 0.006, "train/clip_fraction": 0.04 + rng.random() * 0.06, "train/clip_range": 0.2,
                       "train/entropy_loss": -1.38 + it * 0.004, "train/explained_variance": min(0.97, 0.1 + it * 0.01),
                       "train/learning_rate": 0.0003, "train/loss": lv, "train/n_updates": 10 * (it - 1),
                       "train/policy_gradient_loss": -0.004 - rng.random() * 0.006, "train/value_loss": 2.1 * lv})
            fx.point(n_steps * it, f"{lv:.3g}")
        box(kv)
    meta = dict(writer="Stable-Baselines3 PPO (HumanOutputFormat to stdout)", step_key="time/total_timesteps", loss_key="train/loss",
                events=[],
                notes="Each record is a dashed box of '| key | value |' rows, sorted by key, grouped under 'rollout/', 'time/', 'train/' tag rows with the "
                      "tag stripped from the member keys; floats print as '{:<8.3g}' (e.g. '1.23e+03', '-0.0082 '). The first box has no train/ section "
                      "(PPO trains after the first dump). SB3 itself uses total_timesteps as the step; iterations and n_updates are other counters in the "
                      "same record. train/loss falls from ~160 to ~12 with 18% noise (healthy); value_loss rides 2.1x above it. Curve synthetic.")
    return fx, meta


def render_imagenet_ddp() -> tuple[Fixture, dict]:
    """pytorch/examples ImageNet with --multiprocessing-distributed: every process prints its own ProgressMeter line, unprefixed."""
    rng, fx = random.Random(604), Fixture("imagenet_ddp__resnet50_2proc_divergence.log")
    fx.line("Use GPU: 0 for training")
    fx.line("Use GPU: 1 for training")
    fx.line("=> creating model 'resnet50'")
    fx.line("=> creating model 'resnet50'")
    nb, epochs, freq = 5005, 2, 10
    batches = list(range(1, nb + 1, freq))
    n = epochs * len(batches)
    curve = lm_curve(rng, n, 6.95, 3.4, 260.0, 0.0)
    div_at = 1 * nb + 2011  # epoch 1, batch 2011: lr step too large, the loss climbs and stays up
    avg = [[0.0, 0], [0.0, 0]]
    k = 0
    for ep in range(epochs):
        for r in (0, 1):
            avg[r] = [0.0, 0]
        for b in batches:
            step = ep * nb + b
            for r in (0, 1):
                base = curve[k]
                if step >= div_at:
                    base = base * (1 + min(1.4, (step - div_at) / 600))
                v = base * (1 + rng.gauss(0, 0.04))
                avg[r][0] += v
                avg[r][1] += 1
                a = avg[r][0] / avg[r][1]
                bt = 0.21 + rng.random() * 0.03 if b > 1 else 6.1 + rng.random()
                acc = max(0.0, min(100.0, 100 * math.exp(-v / 1.3)))
                fx.line(f"Epoch: [{ep}][{b:4d}/{nb}]\tTime {bt:6.3f} ({bt:6.3f})\tData {bt * 0.1:6.3f} ({bt * 0.1:6.3f})\tLoss {v:.4e} ({a:.4e})\tAcc@1 {acc:6.2f} ({acc:6.2f})\tAcc@5 {min(100, acc * 2.6):6.2f} ({min(100, acc * 2.6):6.2f})")
                if r == 0:
                    fx.point(step, f"{v:.4e}")
            k += 1
        for _proc in (0, 1):
            for tb in range(1, 196, 10):
                vl = curve[k - 1] * 0.95
                fx.line(f"Test: [{tb:3d}/196]\tTime  0.180 ( 0.180)\tLoss {vl:.4e} ({vl:.4e})\tAcc@1  {30 + ep * 12:5.2f} ( {30 + ep * 12:5.2f})\tAcc@5  {55 + ep * 10:5.2f} ( {55 + ep * 10:5.2f})")
            fx.line(f" *   Acc@1 {30.123 + ep * 12:.3f} Acc@5 {55.456 + ep * 10:.3f}")
    meta = dict(writer="pytorch/examples imagenet/main.py (2 processes, mp.spawn)", step_key="epoch*batch", loss_key="Loss (the value before the parenthesised epoch mean)",
                events=[{"kind": "divergence", "step": div_at}],
                notes="Both processes print every ProgressMeter line with no rank marker, so each step appears twice with two different per-batch losses "
                      "(close, 4% noise each); the manifest points are process 0's (the first of each pair). '[  11/5005]' counts batches within the epoch "
                      "(5005 per epoch, display(i + 1) every 10); step = epoch*5005 + batch. 'Test: [..]' lines are validation (not training) and "
                      "' * Acc@1' summaries close each epoch. From epoch 1 batch 2011 the loss climbs to 2.4x over ~600 batches and stays. "
                      "Loss printed '{:.4e}' (e.g. 6.1234e+00). 'Use GPU' / '=> creating model' lines as the example prints them.")
    return fx, meta


def render_chainer_espnet() -> tuple[Fixture, dict]:
    """ESPnet1 (chainer Trainer): PrintReport's header once, then fixed-width rows every 100 iterations, validation cells filled at epoch ends."""
    rng, fx = random.Random(605), Fixture("espnet1_chainer_printreport__spike.log")
    keys = ["epoch", "iteration", "main/loss", "main/loss_ctc", "main/loss_att", "validation/main/loss", "validation/main/loss_ctc",
            "validation/main/loss_att", "main/acc", "validation/main/acc", "elapsed_time"]
    widths = [max(10, len(s)) for s in keys]
    fx.line("2021-03-08 11:02:13,127 (asr:423) INFO: #iterations per epoch: 1403")
    fx.line("2021-03-08 11:02:13,128 (asr:424) INFO: total #iterations: 28060")
    fx.raw("  ".join(f"{k:{w}}" for k, w in zip(keys, widths, strict=True)) + "\n")
    per_epoch, every, epochs = 1403, 100, 6
    n = per_epoch * epochs // every
    curve = lm_curve(rng, n, 210.0, 48.0, 18.0, 0.03)
    spike = 4100
    elapsed = 0.0
    for j in range(1, n + 1):
        it = j * every
        ep = it // per_epoch
        loss = curve[j - 1]
        if spike <= it < spike + 5 * every:
            loss *= 1 + 2.2 * math.exp(-(it - spike) / every / 1.2)
        elapsed += 61.3 + rng.random() * 3
        row = {"epoch": ep, "iteration": it, "main/loss": loss, "main/loss_ctc": loss * 1.7, "main/loss_att": loss * 0.7,
               "main/acc": min(0.95, 0.3 + j * 0.0025), "elapsed_time": elapsed}
        if (it - every) // per_epoch < ep:  # an evaluation ran at the epoch boundary inside this interval
            row.update({"validation/main/loss": loss * 0.8, "validation/main/loss_ctc": loss * 1.35, "validation/main/loss_att": loss * 0.55,
                        "validation/main/acc": min(0.95, 0.32 + j * 0.0025)})
        cells = [f"{row[k]:<{w}g}  " if k in row else " " * (w + 2) for k, w in zip(keys, widths, strict=True)]
        fx.raw("\x1b[J" + "".join(cells) + "\n")
        fx.point(it, f"{loss:g}")
    meta = dict(writer="ESPnet1 ASR recipe (chainer Trainer + PrintReport)", step_key="iteration", loss_key="main/loss",
                events=[{"kind": "spike", "step": spike}],
                notes="A header row names the columns once; each row is fixed-width '{:<Wg}' cells (6 significant digits), preceded by ESC[J. The "
                      "validation/* cells are blank except in rows whose interval crossed an epoch end. main/loss_ctc and main/loss_att are "
                      "components, validation/main/loss an evaluation. A spike at iteration 4100 (x3.2, back within ~4 rows). The two '(asr:...)' "
                      "lines are approximate; ESPnet's ProgressBar output is left out.")
    return fx, meta


RENDERERS = [render_diffusers, render_yolov5, render_sb3_ppo, render_imagenet_ddp, render_chainer_espnet]


def main() -> None:
    """Render every fixture and write console/MANIFEST.json."""
    write_corpus(RENDERERS, SOURCES, OUT)


if __name__ == "__main__":
    main()
