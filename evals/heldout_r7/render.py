"""Render the round-7 held-out trainer consoles in evals/heldout_r7/console/ (seeded, deterministic).

    python evals/heldout_r7/render.py       # rewrites console/*.log and console/MANIFEST.json

Three trainers that none of the other corpora (tests/data/console/, evals/heldout*/console/) covers.
Each ``render_<trainer>`` re-expresses the per-step print of the cited source file with Python
formatting (no code copied), adds start-up output, a synthetic curve and at most one planted event
printed the way that trainer prints it. Lines around the per-step print that were not checked against
source are called "approximate" in the manifest notes. Helpers come from the first held-out renderer.
"""
# ruff: noqa: E501 - rendered/printed lines are kept whole, as the trainer prints them
from __future__ import annotations

import math
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "heldout"))
from render import Fixture, ts, write_corpus  # noqa: E402

OUT = HERE / "console"

SOURCES = {
    "darknet": "github.com/AlexeyAB/darknet src/detector.c train_detector() (518780b3c3e14362818b156fb736f16340cd8312; printf(\"\\n %d: %f, %f avg loss, %f rate, %lf seconds, %d images, %f hours left\\n\", iteration, loss, avg_loss, rate, seconds, iteration*imgs, avg_time); avg_loss reset to loss when NaN, then avg_loss*.9 + loss*.1)",
    "tf_nmt": "github.com/tensorflow/nmt nmt/train.py (0be864257a76c151eef20ea689755f08bc1faf4e; print_step_info('  ', ...): '%sstep %d lr %g step-time %.2fs wps %.2fK ppl %.2f gN %.2f %s, %s' with get_best_results and time.ctime(); '# Start step %d, lr %g, %s', '# Init train iterator, skipping %d elements', '# Save eval, global step %d' every 10 x steps_per_stats)",
    "hifigan": "github.com/jik876/hifi-gan train.py (3484fe682372b134d95d23523838ed5b304d5d95; print('Epoch: {}'), every stdout_interval=5 steps print('Steps : {:d}, Gen Loss Total : {:4.3f}, Mel-Spec. Error : {:4.3f}, s/b : {:4.3f}'), print('Time taken for epoch {} is {} sec\\n'); steps count on across epochs)",
}


def c_float(x: float) -> str:
    """C's printf('%f'): six decimals; glibc prints a NaN with the sign bit set as '-nan'."""
    return "-nan" if math.isnan(x) else f"{x:f}"


def render_darknet() -> tuple[Fixture, dict]:
    """AlexeyAB darknet: yolo-layer lines per forward, then the iteration line with an unnamed loss and its 'avg loss'."""
    rng, fx = random.Random(701), Fixture("darknet_alexeyab_yolov4__custom_nan.log")
    fx.line(" CUDA-version: 11020 (11040), cuDNN: 8.1.1, CUDNN_HALF=1, GPU count: 1  ")
    fx.line(" OpenCV version: 4.2.0")
    fx.line("yolov4-custom")
    fx.line("net.optimized_memory = 0 ")
    fx.line("mini_batch = 4, batch = 64, time_steps = 1, train = 1 ")
    fx.line("Learning Rates: 0.001, Momentum: 0.949, Decay: 0.0005")
    fx.line(" Detection layer: 139 - type = 28 ")
    fx.line(" Detection layer: 150 - type = 28 ")
    fx.line(" Detection layer: 161 - type = 28 ")
    fx.line("Loaded: 0.000035 seconds")
    nan_from, last, burn_in, avg, t_left, bbox = 1234, 1400, 1000, -1.0, 14.5, 0
    for it in range(1, last + 1):
        loss = 1.1 + 2600 * math.exp(-it / 14) + 5 * math.exp(-it / 260)
        loss *= math.exp(rng.gauss(0, 0.16))
        if it >= nan_from:
            loss = float("nan")
        avg = loss if (avg < 0 or avg != avg) else avg
        avg = avg * 0.9 + loss * 0.1
        for layer, share in ((139, 0.55), (150, 0.3), (161, 0.15)):
            count = rng.randint(1, 90)
            iou = 0.0 if it < 30 else min(0.85, 0.2 + it / 2000 + rng.gauss(0, 0.08))
            part = loss * share
            fx.line(f"v3 (iou loss, Normalizer: (iou: 0.07, obj: 1.00, cls: 1.00) Region {layer} Avg (IOU: {c_float(max(0.0, iou) if part == part else part)}), count: {count}, "
                    f"class_loss = {c_float(part * 0.8)}, iou_loss = {c_float(part * 0.2)}, total_loss = {c_float(part)} ")
        bbox += rng.randint(60, 140)
        fx.line(f" total_bbox = {bbox}, rewritten_bbox = {100 * rng.uniform(0.02, 0.06):f} % ")
        rate = 0.001 * min(1.0, (it / burn_in) ** 4)
        t_left = max(0.0, t_left - 0.0101 + rng.gauss(0, 0.0005))
        fx.line("")
        fx.line(f" {it}: {c_float(loss)}, {c_float(avg)} avg loss, {rate:f} rate, {2.9 + rng.random() * 0.4:f} seconds, {it * 64} images, {t_left:f} hours left")
        fx.point(it, "nan" if loss != loss else c_float(loss))  # the spot checks skip "nan"
        if it % 100 == 0:
            fx.line("Saving weights to backup//yolov4-custom_last.weights")
    meta = dict(writer="AlexeyAB darknet detector train (yolov4-custom.cfg)", step_key="iteration (the leading ' N:')",
                loss_key="first value (this iteration's loss, unnamed; 'avg loss' is its running mean)",
                events=[{"kind": "nonfinite", "step": nan_from}],
                notes="Each iteration: three yolo-layer lines ('... Region 139 Avg (IOU: x), count: n, class_loss = a, iou_loss = b, total_loss = c') and a "
                      "' total_bbox = ...' line (all approximate, from a darknet paste, not checked against source), then a blank line and ' N: L, A avg "
                      "loss, R rate, S seconds, I images, H hours left' (from source). The loss is the unnamed first value; the yolo lines' named "
                      "total_loss values are per-layer parts. The rate ramps as (it/1000)^4 (burn_in), so it prints 0.000000 early. Loss starts in "
                      "the thousands and falls below 2. From iteration 1234 every value prints '-nan' (glibc) and training goes on. Start-up lines "
                      "and the 'Saving weights' line every 100 iterations are approximate.")
    return fx, meta


def render_tf_nmt() -> tuple[Fixture, dict]:
    """tensorflow/nmt: an indented line every steps_per_stats steps with the training perplexity, eval blocks between."""
    rng, fx = random.Random(702), Fixture("tf_nmt_gnmt__wmt16_spike.log")
    t0 = 0.0
    fx.line("# log_file=/tmp/nmt_model/log_1741944413")
    fx.line("  created train model with fresh parameters, time 0.41s")
    fx.line("  eval dev: perplexity 17584.72, time 7s, " + f"{ts(30):%a %b %d %H:%M:%S %Y}.")
    fx.line("# Start step 0, lr 1, " + f"{ts(31):%a %b %d %H:%M:%S %Y}")
    fx.line("# Init train iterator, skipping 0 elements")
    every, last, spike, best = 100, 30000, 17600, "bleu 0.00"
    for step in range(every, last + 1, every):
        ppl = 11.5 + 1500 * math.exp(-step / 700) + 60 * math.exp(-step / 5000)
        ppl *= math.exp(rng.gauss(0, 0.035))
        if step == spike:
            ppl *= 6.5
        elif step == spike + every:
            ppl *= 1.6
        t0 += 100 * (0.37 + rng.random() * 0.03)
        fx.line(f"  global step {step} lr 1 step-time {0.37 + rng.random() * 0.03:.2f}s wps {11.6 + rng.random():.2f}K ppl {ppl:.2f} "
                f"gN {4.5 + 3 * math.exp(-step / 4000) + rng.random():.2f} {best}, {ts(60 + t0):%a %b %d %H:%M:%S %Y}")
        fx.point(step, f"{ppl:.2f}")
        if step % (10 * every) == 0:
            fx.line(f"# Save eval, global step {step}")
            fx.line(f"  loaded infer model parameters from /tmp/nmt_model/translate.ckpt-{step}, time 0.18s")
            fx.line(f"  eval dev: perplexity {ppl * 1.25:.2f}, time 6s, {ts(70 + t0):%a %b %d %H:%M:%S %Y}.")
            fx.line(f"  eval test: perplexity {ppl * 1.3:.2f}, time 6s, {ts(76 + t0):%a %b %d %H:%M:%S %Y}.")
        if step % (50 * every) == 0:
            bleu = 4 + 17 * (1 - math.exp(-step / 9000))
            best = f"bleu {bleu:.2f}"
            fx.line(f"# External evaluation, global step {step}")
            fx.line("  decoding to output /tmp/nmt_model/output_dev.")
            fx.line(f"  done, num sentences 3000, num translations per input 1, time 41s, {ts(120 + t0):%a %b %d %H:%M:%S %Y}.")
            fx.line(f"  bleu dev: {bleu:.1f}")
    meta = dict(writer="tensorflow/nmt nmt.nmt (GNMT, WMT16 de-en)", step_key="global step", loss_key="ppl (training perplexity; its log is the loss)",
                events=[{"kind": "spike", "step": spike}],
                notes="Every 100 steps '  global step N lr 1 step-time Ts wps WK ppl P gN G bleu B, <ctime>' (from source; B is the best dev BLEU so far, "
                      "0.00 until the first external evaluation). Every 1000 steps '# Save eval, global step N' (from source) then '  eval dev: perplexity P, time Ts, <ctime>.' and the same for test "
                      "(the format of nmt/model_helper.py compute_perplexity + nmt/utils/misc_utils.py print_time, found by code search, commit not "
                      "pinned; their placement and the checkpoint-load line approximate), dev/test perplexities ~25-30% above the training one; "
                      "every 5000 steps an external evaluation block (approximate). Perplexity falls from ~1400 to ~12. One spike at step 17600 (x6.5, then x1.6, then back).")
    return fx, meta


def render_hifigan() -> tuple[Fixture, dict]:
    """HiFi-GAN train.py: 'Epoch: N' banners, a line every 5 steps, a per-epoch time line; a healthy GAN vocoder run."""
    rng, fx = random.Random(703), Fixture("hifigan_jik876__ljspeech_v1.log")
    fx.line("Initializing Training Process..")
    fx.line("Batch size per GPU : 16")
    fx.line("checkpoints directory :  cp_hifigan")
    per_epoch, epochs, steps = 809, 4, 0
    for epoch in range(1, epochs + 1):
        fx.line(f"Epoch: {epoch}")
        for _ in range(per_epoch):
            if steps % 5 == 0:
                mel = 0.62 + 1.5 * math.exp(-steps / 500) + 0.25 * math.exp(-steps / 3000)
                mel *= math.exp(rng.gauss(0, 0.05))
                # the generator total is 45 x the mel L1 plus adversarial and feature-matching terms, which wobble
                gen = 45 * mel + 9 + 6 * (1 - math.exp(-steps / 800)) + rng.gauss(0, 1.6)
                sb = 585.139 if steps == 0 else 0.43 + rng.random() * 0.03
                fx.line(f"Steps : {steps:d}, Gen Loss Total : {gen:4.3f}, Mel-Spec. Error : {mel:4.3f}, s/b : {sb:4.3f}")
                fx.point(steps, f"{gen:.3f}")
            steps += 1
        fx.line(f"Time taken for epoch {epoch} is {int(350 + rng.random() * 20)} sec\n")
    meta = dict(writer="jik876/hifi-gan train.py (config_v1, LJSpeech)", step_key="Steps", loss_key="Gen Loss Total",
                events=[],
                notes="Healthy. 'Epoch: N' banners, then every 5 steps 'Steps : N, Gen Loss Total : X, Mel-Spec. Error : Y, s/b : Z' (labels end in ' : '), "
                      "'Time taken for epoch N is T sec' and a blank line after each epoch (all from source); steps run on across epochs (809 per "
                      "epoch). The generator total (45 x mel L1 + adversarial + feature matching) falls from ~110 to ~45 with the adversarial terms "
                      "rising slowly; noise +-1.6 absolute. s/b is 585 at step 0 (first-batch start-up). 'Batch size per GPU' is from source; the "
                      "model print is left out; 'checkpoints directory' is as a user's paste shows it (approximate).")
    return fx, meta


RENDERERS = [render_darknet, render_tf_nmt, render_hifigan]


def main() -> None:
    """Render every fixture and write console/MANIFEST.json."""
    write_corpus(RENDERERS, SOURCES, OUT)


if __name__ == "__main__":
    main()
