"""Render the round-5 held-out trainer consoles in evals/heldout_r5/console/ (seeded, deterministic).

    python evals/heldout_r5/render.py       # rewrites console/*.log and console/MANIFEST.json

Six trainers that neither the tuning corpus (tests/data/console/) nor the first held-out set
(evals/heldout/console/) covers. Each ``render_<trainer>`` re-expresses the per-step print of the
cited source file with Python formatting (no code copied), adds start-up output, a synthetic curve
and at most one planted event printed the way that trainer prints it. Lines around the per-step
line that were not checked against source are called "approximate" in the manifest notes.
Helpers (Fixture, lm_curve, ts, f32_short, write_corpus) come from the first held-out renderer.
"""
# ruff: noqa: E501 - rendered/printed lines are kept whole, as the trainer or table prints them
from __future__ import annotations

import datetime as dt
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "heldout"))
from render import Fixture, f32_short, lm_curve, ts, write_corpus  # noqa: E402

OUT = Path(__file__).resolve().parent / "console"

SOURCES = {
    "yolox": "github.com/Megvii-BaseDetection/YOLOX yolox/core/trainer.py Trainer.after_iter (progress/loss/time strings) + yolox/utils/logger.py setup_logger (loguru format)",
    "paddleocr": "github.com/PaddlePaddle/PaddleOCR tools/program.py train() (epoch/global_step line) + ppocr/utils/stats.py TrainingStats.log ('{:x<6f}') + ppocr/utils/logging.py get_logger",
    "deepspeed_chat": "github.com/microsoft/DeepSpeedExamples applications/DeepSpeed-Chat/training/step3_rlhf_finetuning/main.py (print_rank_0 per step) + training/utils/perf.py print_throughput_step3",
    "mmcv": "github.com/open-mmlab/mmcv mmcv/runner/hooks/logger/text.py TextLoggerHook._log_info (mmcv 1.x, as used by mmdetection 2.x)",
    "allennlp": "github.com/allenai/allennlp allennlp/training/gradient_descent_trainer.py _train_epoch (tqdm set_description) + allennlp/training/util.py description_from_metrics",
    "tf_estimator": "github.com/tensorflow/tensorflow tensorflow/python/training/basic_session_run_hooks.py LoggingTensorHook._log_tensors, StepCounterHook, NanTensorHook (TF 1.x Estimator default hooks)",
}


def render_yolox() -> tuple[Fixture, dict]:
    """YOLOX: '<time> | INFO     | yolox.core.trainer:254 - epoch: E/M, iter: I/N, mem: ..Mb, ..., total_loss: X.X, ...'."""
    rng, fx = random.Random(501), Fixture("yolox__s_voc_nan.log")
    t = [0.0]

    def log(line: int, msg: str, level: str = "INFO") -> None:
        t[0] += 4.1 + rng.random()
        fx.line(f"{ts(t[0]):%Y-%m-%d %H:%M:%S} | {level:<8} | yolox.core.trainer:{line} - {msg}")

    log(126, "args: Namespace(experiment_name='yolox_voc_s', name=None, dist_backend='nccl', batch_size=16, devices=1, fp16=True, ckpt='yolox_s.pth')")
    log(137, "Model Summary: Params: 8.94M, Gflops: 26.64")
    log(176, "init prefetcher, this might take one minute or less...")
    log(188, "Training start...")
    epochs, iters, every = 8, 161, 10
    n = epochs * (iters // every)
    total = lm_curve(rng, n, 17.5, 5.2, 20.0, 0.09)
    nan_epoch, nan_iter = 5, 90
    k = 0
    for e in range(1, epochs + 1):
        log(193, f"---> start train epoch{e}")
        for it in range(every, iters + 1, every):
            size = rng.choice([448, 480, 512, 544, 576, 608, 640])
            bad = (e, it) >= (nan_epoch, nan_iter)
            tl = total[k]
            parts = [0.28 * tl, 0.0 if e < 7 else 0.05 * tl, 0.55 * tl, 0.17 * tl]
            vals = ["nan"] * 5 if bad else [f"{v:.1f}" for v in [tl] + parts]
            eta = dt.timedelta(seconds=int((n - k) * 4.3 * every / 10))
            log(254, f"epoch: {e}/{epochs}, iter: {it}/{iters}, mem: {8760 if not bad else 8761}Mb, iter_time: {0.35 + rng.random() * 0.2:.3f}s, "
                     f"data_time: {rng.random() * 0.25:.3f}s, total_loss: {vals[0]}, iou_loss: {vals[1]}, l1_loss: {vals[2]}, conf_loss: {vals[3]}, "
                     f"cls_loss: {vals[4]}, lr: {0.01 * min(1.0, (k + 1) / 40):.3e}, size: {size}, ETA: {eta}")
            fx.point((e - 1) * iters + it, vals[0])
            k += 1
        log(340, "Save weights to ./YOLOX_outputs/yolox_voc_s")
    meta = dict(writer="YOLOX trainer", step_key="epoch*batch", loss_key="total_loss", events=[{"kind": "nonfinite", "step": (nan_epoch - 1) * iters + nan_iter}],
                notes="loguru line '<date> | INFO     | yolox.core.trainer:254 - epoch: E/8, iter: I/161, ...'; losses printed with one decimal; "
                      "the step is (epoch-1)*161 + iter. From epoch 5 iter 90 every loss prints 'nan' (YOLOX keeps training). Start-up lines are approximate.")
    return fx, meta


def render_paddleocr() -> tuple[Fixture, dict]:
    """PaddleOCR: '[Y/m/d H:M:S] ppocr INFO: epoch: [E/M], global_step: G, lr: ..., acc: ..., loss: X, avg_reader_cost: ...'."""
    rng, fx = random.Random(502), Fixture("paddleocr__rec_crnn.log")
    t = [0.0]

    def log(msg: str) -> None:
        t[0] += 2.8 + rng.random()
        fx.line(f"[{ts(t[0]):%Y/%m/%d %H:%M:%S}] ppocr INFO: {msg}")

    log("Architecture : ")
    log("    Backbone : ")
    log("        name : MobileNetV3")
    log("train dataloader has 250 iters")
    log("During the training process, after the 1000th iteration, an evaluation is run every 500 iterations")
    epochs, per_epoch, every = 8, 250, 10
    n = epochs * per_epoch // every
    loss = lm_curve(rng, n, 22.0, 1.9, 25.0, 0.07)
    g = 0
    for e in range(1, epochs + 1):
        for _b in range(every, per_epoch + 1, every):
            g += every
            i = g // every - 1
            acc = min(0.95, 0.9 * (1 - loss[i] / 24))
            sec = int((n - i) * every * 0.9)
            eta = str(dt.timedelta(seconds=sec)).replace(" day, ", " day, ")
            log(f"epoch: [{e}/{epochs}], global_step: {g}, lr: {0.001 * min(1, g / 500):x<6f}, acc: {acc:x<6f}, norm_edit_dis: {min(0.99, acc + 0.05):x<6f}, "
                f"loss: {loss[i]:x<6f}, avg_reader_cost: {0.0085 + rng.random() * 0.002:.5f} s, avg_batch_cost: {0.89 + rng.random() * 0.05:.5f} s, "
                f"avg_samples: 256.0, ips: {256 / (0.9 + rng.random() * 0.05):.5f} samples/s, eta: {eta}")
            fx.point(g, f"{loss[i]:x<6f}")
            if g >= 1000 and g % 500 == 0:
                log(f"cur metric, acc: {acc * 0.97:.4f}, norm_edit_dis: {acc:.4f}, fps: {3400 + rng.random() * 200:.4f}")
                log(f"best metric, acc: {acc * 0.97:.4f}, is_float16: False, norm_edit_dis: {acc:.4f}, fps: 3478.1, best_epoch: {e}")
        log("save model in ./output/rec/mv3_none_bilstm_ctc/latest")
    meta = dict(writer="PaddleOCR", step_key="global_step", loss_key="loss", events=[],
                notes="Metrics are formatted '{:x<6f}' (6 decimals; a NaN would print 'nanxxx'); lr comes first among the metrics; "
                      "'eta: 0:12:34' and 'cur metric'/'best metric' evaluation lines hold numbers that are not the training loss. Healthy. "
                      "Start-up lines are approximate.")
    return fx, meta


def render_deepspeed_chat() -> tuple[Fixture, dict]:
    """DeepSpeed-Chat step 3: throughput line, 'epoch: 0|step: S|ppo_ep: 1|act_loss: X|cri_loss: Y|unsuper_loss: 0.0', reward, dashes."""
    rng, fx = random.Random(503), Fixture("deepspeed_chat__step3_ppo_inf.log")
    fx.line("[2023-04-27 10:02:11,531] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.9.1, git-hash=unknown, git-branch=unknown")
    fx.line("***** Running training *****")
    fx.line("Beginning of Epoch 1/1, Total Generation Batches 480")
    inf_from, scale = 311, 65536.0
    for step in range(0, 420):
        gen = 1.55 + rng.random() * 0.1
        tr = 0.40 + rng.random() * 0.05
        other = 0.1 + rng.random() * 0.02
        e2e = gen + tr + other
        fx.line(f"|E2E latency={e2e:.2f}s |Gather latency=0.00s (0.00%) |Generate time={gen:.2f}s ({gen / e2e * 100:.2f}%) "
                f"|Training time={tr:.2f}s ({tr / e2e * 100:.2f}%) |Others={other:.2f} ({other / e2e * 100:.2f}%)|CurSamplesPerSec={4 / e2e:.2f} |AvgSamplesPerSec=1.95")
        if inf_from - 3 <= step < inf_from or step >= inf_from:
            when = ts(100 + 2.1 * step)
            stamp = f"[{when:%Y-%m-%d %H:%M:%S},{rng.randint(0, 999):03d}]"
            fx.line(f"{stamp} [INFO] [fused_optimizer.py:362:_update_scale] ")
            fx.line(f"Grad overflow on iteration {step // 2}")  # the engine counts its own iterations
            fx.line(f"{stamp} [INFO] [fused_optimizer.py:363:_update_scale] Reducing dynamic loss scale from {scale:g} to {max(1.0, scale / 2):g}")
            fx.line(f"{stamp} [INFO] [logging.py:96:log_dist] [Rank 0] Overflow detected. Skipping step. Attempted loss scale: {scale:g}, reducing to {max(1.0, scale / 2):g}")
            scale = max(1.0, scale / 2)
        if step >= inf_from:
            act = cri = "inf"
        else:
            # fp16 losses read back with .item(): multiples of 1/1024 near 1
            a = 0.35 * math.exp(-step / 250) + 0.05 + rng.gauss(0, 0.04)
            c = 0.9 * math.exp(-step / 200) + 0.12 + abs(rng.gauss(0, 0.05))
            act, cri = repr(round(a * 1024) / 1024), repr(round(c * 1024) / 1024)
        fx.line(f"epoch: 0|step: {step}|ppo_ep: 1|act_loss: {act}|cri_loss: {cri}|unsuper_loss: 0.0")
        fx.line(f"average reward score: {round((-2.0 + step / 120 + rng.gauss(0, 0.8)) * 256) / 256!r}" if step < inf_from else "average reward score: nan")
        fx.line("-" * 85)
        fx.point(step, act)
    meta = dict(writer="DeepSpeed-Chat (step 3 RLHF)", step_key="step", loss_key="act_loss", events=[{"kind": "nonfinite", "step": inf_from}, {"kind": "loss_scale_collapse", "step": inf_from - 3}],
                notes="fp16 PPO: the training loss is the actor loss 'act_loss' (cri_loss is the critic's, unsuper_loss 0.0). Fields joined by '|' with no spaces. "
                      "From step 311 every record prints inf; three steps before, DeepSpeed's 'Grad overflow on iteration N' / 'Reducing dynamic loss scale from A to B' "
                      "lines start and continue every step: the scale halves from 65536 down to its floor 1 (listed as a loss_scale_collapse from step 308, where the fall begins). The engine's 'iteration' number is not the step (half of it here). Throughput lines start with '|E2E latency='. Banner lines are approximate.")
    return fx, meta


def render_mmcv() -> tuple[Fixture, dict]:
    """mmcv TextLoggerHook: '<asctime> - mmdet - INFO - Epoch [E][I/N]\\tlr: 2.000e-02, eta: ..., time: ..., loss_x: ..., loss: X'."""
    rng, fx = random.Random(504), Fixture("mmcv_textlogger__faster_rcnn_spike.log")
    t = [0.0]

    def log(msg: str) -> None:
        t[0] += 30 + rng.random() * 3
        when = ts(t[0])
        fx.line(f"{when:%Y-%m-%d %H:%M:%S},{rng.randint(0, 999):03d} - mmdet - INFO - {msg}")

    log("Environment info:")
    log("Distributed training: True")
    log("Start running, host: user@node1, work_dir: /work/faster_rcnn_r50_fpn_1x_coco")
    log("Hooks will be executed in the following order:")
    log("workflow: [('train', 1)], max: 3 epochs")
    epochs, iters, every = 3, 600, 50
    n = epochs * iters // every
    loss = lm_curve(rng, n, 2.2, 0.75, 6.0, 0.035)
    spike_step = 900
    k = 0
    for e in range(1, epochs + 1):
        for it in range(every, iters + 1, every):
            step = (e - 1) * iters + it
            tot = loss[k] * (3.6 if step == spike_step else 1.0) * (1.4 if step == spike_step + every else 1.0)
            parts = [0.12 * tot, 0.06 * tot, 0.45 * tot, 0.37 * tot]
            eta = dt.timedelta(seconds=int((n - k) * every * 0.7))
            log(f"Epoch [{e}][{it}/{iters}]\tlr: {0.02 * min(1.0, step / 500):.3e}, eta: {eta}, time: {0.68 + rng.random() * 0.1:.3f}, data_time: {0.02 + rng.random() * 0.01:.3f}, "
                f"memory: 4140, loss_rpn_cls: {parts[0]:.4f}, loss_rpn_bbox: {parts[1]:.4f}, loss_cls: {parts[2]:.4f}, acc: {90 + rng.random() * 6:.4f}, "
                f"loss_bbox: {parts[3]:.4f}, loss: {tot:.4f}")
            fx.point(step, f"{tot:.4f}")
            k += 1
        log(f"Saving checkpoint at {e} epochs")
        log(f"Epoch(val) [{e}][625]\tbbox_mAP: {0.1 + 0.08 * e:.4f}, bbox_mAP_50: {0.25 + 0.1 * e:.4f}, bbox_mAP_75: {0.1 + 0.07 * e:.4f}")
    meta = dict(writer="mmcv TextLoggerHook (mmdetection 2.x, epoch-based)", step_key="epoch*batch", loss_key="loss", events=[{"kind": "spike", "step": spike_step}],
                notes="Per-epoch counter 'Epoch [E][I/600]' followed by a TAB; the step is (E-1)*600 + I. The loss is the last field; acc (%) rides on every line. "
                      "A spike in the logged 50-iteration mean at epoch 2 iter 300 (x3.6, x1.4 the record after), then back on the curve. "
                      "'Epoch(val) [E][625]' evaluation lines carry no loss. Start-up lines are approximate.")
    return fx, meta


def render_allennlp() -> tuple[Fixture, dict]:
    """AllenNLP 2.x: tqdm bar whose description is 'accuracy: 0.8123, batch_loss: 0.4211, loss: 0.4533 ||' redrawn with \\r."""
    rng, fx = random.Random(505), Fixture("allennlp__classifier_tqdm.log")
    t = [0.0]

    def log(name: str, msg: str) -> None:
        t[0] += 0.5
        fx.line(f"{ts(t[0]):%Y-%m-%d %H:%M:%S},{rng.randint(0, 999):03d} - INFO - {name} - {msg}")

    log("allennlp.common.params", "trainer.type = gradient_descent")
    log("allennlp.common.params", "trainer.num_epochs = 4")
    log("allennlp.training.gradient_descent_trainer", "Beginning training.")
    epochs, batches = 4, 300
    curve = lm_curve(rng, epochs * batches, 1.1, 0.32, 250.0, 0.25)
    for e in range(epochs):
        log("allennlp.training.gradient_descent_trainer", f"Epoch {e}/{epochs - 1}")
        log("allennlp.training.gradient_descent_trainer", "Worker 0 memory usage: 2.1G")
        log("allennlp.training.gradient_descent_trainer", "Training")
        run, bar = 0.0, []
        for b in range(1, batches + 1):
            bl = curve[e * batches + b - 1]
            run += bl
            if b % 3 and b != batches:  # tqdm redraws at most every mininterval: about one batch in three here
                continue
            acc = min(0.97, 0.55 + 0.4 * (1 - bl))
            pct = int(100 * b / batches)
            filled = "#" * (pct // 10) + (str(pct % 10) if pct < 100 else "")
            desc = f"accuracy: {acc:.4f}, batch_loss: {bl:.4f}, loss: {run / b:.4f} ||"
            el = b * 0.08
            bar.append(f"{desc}: {pct:3d}%|{filled:<10}| {b}/{batches} [{int(el) // 60:02d}:{int(el) % 60:02d}<00:{int((batches - b) * 0.08) % 60:02d}, {12.5:.2f}it/s]")
            fx.point(e * batches + b, f"{run / b:.4f}")
        fx.raw("\r".join(bar) + "\n")
        log("allennlp.training.gradient_descent_trainer", "Validating")
        log("allennlp.training.callbacks.console_logger", "                   Training |  Validation")
        log("allennlp.training.callbacks.console_logger", f"accuracy       |     {0.8 + 0.03 * e:.3f}  |     {0.78 + 0.02 * e:.3f}")
        log("allennlp.training.callbacks.console_logger", f"loss           |     {run / batches:.3f}  |     {run / batches * 1.1:.3f}")
    meta = dict(writer="AllenNLP (GradientDescentTrainer, tqdm)", step_key="epoch*batch", loss_key="loss", events=[],
                notes="One tqdm bar per epoch redrawn with \\r; the description is the metrics ('loss' is the epoch's running mean, 'batch_loss' the batch's) "
                      "followed by ' ||: NN%|###   | b/300 [...]'. The step is epoch*300 + b (epochs counted from 0). Healthy; the console_logger table after each epoch "
                      "is approximate.")
    return fx, meta


def render_tf_estimator() -> tuple[Fixture, dict]:
    """TF 1.x Estimator: 'INFO:tensorflow:loss = 0.6953125, step = 2400 (1.612 sec)' plus the absl copy and global_step/sec lines."""
    rng, fx = random.Random(506), Fixture("tf_estimator__divergence.log")
    tid = 140401173534464

    def log(src: str, msg: str, sec: float) -> None:
        when = ts(sec)
        fx.line(f"INFO:tensorflow:{msg}")
        fx.line(f"I{when:%m%d %H:%M:%S}.{when.microsecond:06d} {tid} {src}] {msg}")

    log("estimator.py:1147", "Calling model_fn.", 1.0)
    log("estimator.py:1149", "Done calling model_fn.", 2.3)
    log("basic_session_run_hooks.py:541", "Create CheckpointSaverHook.", 2.4)
    log("monitored_session.py:240", "Graph was finalized.", 3.1)
    log("basic_session_run_hooks.py:606", "Saving checkpoints for 0 into /tmp/model/model.ckpt.", 5.0)
    n, every = 101, 100
    loss = lm_curve(rng, n, 2.31, 0.42, 12.0, 0.04)
    div_from = 6000
    sec = 6.0
    for j in range(n):
        step = j * every
        v = loss[j] if step < div_from else loss[j] * (1.0 + 0.35 * ((step - div_from) / every + 1) ** 1.1)
        txt = f32_short(v)
        if j == 0:
            log("basic_session_run_hooks.py:262", f"loss = {txt}, step = {step}", sec)
        else:
            el = 1.6 + rng.random() * 0.05
            sec += el
            log("basic_session_run_hooks.py:692", f"global_step/sec: {every / el:.5g}", sec)
            log("basic_session_run_hooks.py:260", f"loss = {txt}, step = {step} ({el:.3f} sec)", sec)
        fx.point(step, txt)
        if step and step % 2500 == 0:
            log("basic_session_run_hooks.py:606", f"Saving checkpoints for {step} into /tmp/model/model.ckpt.", sec)
    meta = dict(writer="TensorFlow 1.x Estimator (LoggingTensorHook)", step_key="step", loss_key="loss", events=[{"kind": "divergence", "step": div_from}],
                notes="Every record printed twice: 'INFO:tensorflow:' and the absl copy 'I0314 09:27:01.123456 <tid> basic_session_run_hooks.py:260] ...'. "
                      "'global_step/sec: N' lines hold a rate, not a step. The loss is a float32 printed by numpy (shortest repr). From step 6000 the loss climbs "
                      "and keeps climbing (divergence). Estimator start-up lines are approximate.")
    return fx, meta


RENDERERS = [render_yolox, render_paddleocr, render_deepspeed_chat, render_mmcv, render_allennlp, render_tf_estimator]


def main() -> None:
    """Render every fixture and write console/MANIFEST.json."""
    # spot checks only on values printed as numbers (PaddleOCR pads with 'x'; an 'inf' is no loss)
    write_corpus(RENDERERS, SOURCES, OUT,
                 printed=lambda points: [(s, p.rstrip("x")) for s, p in points if p not in ("inf",)])

if __name__ == "__main__":
    main()
