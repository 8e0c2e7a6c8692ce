"""PyTorch Lightning 1.x / 2.x tqdm bars and NeMo's bar and printer.

Formats taken from github.com/Lightning-AI/pytorch-lightning:
- tag 1.6.0, pytorch_lightning/callbacks/progress/tqdm_progress.py: main bar ``set_description(f"Epoch {epoch}")``
  (its total also counts val batches; the fixture runs without a val loop in that bar), postfix from base.py ``get_standard_metrics``: ``loss`` = running mean as the
  string ``f"{loss:.3g}"`` then ``v_num``; Lightning's ``Tqdm.format_num`` pads floats to 5 characters.
- @ 7f0c3436cd3f6ad3753125672024fc415cbcb414 (2.x), src/lightning/pytorch/callbacks/progress/tqdm_progress.py:
  ``BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"``, the same
  bar reset at each epoch (one physical line of ``\\r`` redraws), postfix ``v_num`` then the ``prog_bar=True`` metrics
  (here ``train_loss``), floats through tqdm's ``format_num`` (``{:.3g}``) padded to 5 characters (``2.340``).
From github.com/NVIDIA/NeMo @ 8cfedd7203462cb251a914e700e5605444277561:
- nemo/lightning/pytorch/callbacks/progress_bar.py ``MegatronProgressBar``: bar_format ``{desc}: {percentage:3.0f}%|{bar}|
  {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]`` over max_steps, postfix ``reduced_train_loss=2.340,
  global_step=99.00, consumed_samples=...``;
- nemo/lightning/pytorch/callbacks/progress_printer.py ``ProgressPrinter`` (NeMo 2 default): ``Training epoch {e},
  iteration {n-1}/{total-1} | {metric}: {val:.4} | ...`` (integers printed as ints), metrics averaged over the
  log interval except ``global_step``.
"""

# ruff: noqa: E501 - rendered/printed lines are kept whole, as the trainer or table prints them
from __future__ import annotations

from evals.console.curve import Event, EventKind
from evals.console.fixture import Run, Spec
from evals.console.text import bar, hms

PL1 = "github.com/Lightning-AI/pytorch-lightning pytorch_lightning/callbacks/progress/tqdm_progress.py + base.py (tag 1.6.0)"
PL2 = "github.com/Lightning-AI/pytorch-lightning src/lightning/pytorch/callbacks/progress/tqdm_progress.py (7f0c3436cd3f6ad3753125672024fc415cbcb414)"
NEMO_BAR = "github.com/NVIDIA/NeMo nemo/lightning/pytorch/callbacks/progress_bar.py MegatronProgressBar (8cfedd7203462cb251a914e700e5605444277561)"
NEMO2 = "github.com/NVIDIA/NeMo nemo/lightning/pytorch/callbacks/progress_printer.py ProgressPrinter (8cfedd7203462cb251a914e700e5605444277561)"
PER_EPOCH = 1000


def tqdm_num(n: float) -> str:
    """tqdm's ``format_num``: the shorter of ``{:.3g}`` (exponent without leading zero) and ``str``."""
    f = f"{n:.3g}".replace("+0", "+").replace("-0", "-")
    s = str(n)
    return f if len(f) < len(s) else s


def pl_num(n: float | str) -> str:
    """Lightning's ``Tqdm.format_num``: tqdm's, then floats/strings padded with zeros to 5 characters."""
    pad = isinstance(n, (float, str))
    if not isinstance(n, str):
        n = tqdm_num(n)
    if pad and "e" not in n:  # no exception for nan: Lightning prints a NaN loss as "nan.0"
        if "." not in n and len(n) < 5:
            n += "."
        n += "0" * (5 - len(n))
    return n


def _meter(desc: str, n: int, total: int, elapsed: float, post: str, rate: bool = True) -> str:
    r = n / elapsed if elapsed else 0.0
    remaining = (total - n) / r if r else 0.0
    rate_s = f", {r:5.2f}it/s" if rate else ""
    return (f"{desc}: {100 * n / total:3.0f}%|{bar(n / total)}| {n}/{total} [{hms(elapsed)}<{hms(remaining)}"
            f"{rate_s}{', ' if post else ''}{post}]")


def _epoch_of(step: int, per: int) -> tuple[int, int]:
    e = (step - 1) // per
    return e, step - e * per


def lightning(run: Run, v1: bool) -> str:
    """Lightning trainer.fit() stdout: model summary, then the epoch bar's redraws (refresh_rate = log interval).

    As observed with Lightning 2.x's TQDMProgressBar (output captured to a file): each update draws twice, first at the
    new n with the *previous* postfix (``_update_n`` refreshes), then with the new metrics (``set_postfix``); the
    validation bars are drawn on the next line (``\\n`` ... ``\\x1b[A``) and erased; the epoch bar then shows
    val_loss, is reset to 0 and relabelled for the next epoch, all on one physical line.
    """
    head = ["GPU available: True (cuda), used: True", "TPU available: False, using: 0 TPU cores",
            "HPU available: False, using: 0 HPUs", "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0]", "",
            "  | Name  | Type | Params | Mode ", "----------------------------------------", "0 | model | GPT  | 124 M  | train",
            "----------------------------------------", "124 M     Trainable params", "0         Non-trainable params",
            "124 M     Total params", "497.759   Total estimated model params size (MB)"]
    val = 100
    total = PER_EPOCH
    parts = ["\rSanity Checking: |          | 0/? [00:00<?, ?it/s]\rSanity Checking DataLoader 0: 100%|██████████| 2/2 "
             "[00:00<00:00,  9.41it/s]\r" + " " * 75 + "\r",
             "\rTraining: |          | 0/? [00:00<?, ?it/s]\rTraining: |          | 0/? [00:00<?, ?it/s]",
             "\r" + _meter("Epoch 0", 0, total, 0, "").replace("[00:00<00:00,  0.00it/s]", "[00:00<?, ?it/s]")]
    post = ""
    val_post = ""
    epoch = 0
    for i in range(run.n):
        e, b = _epoch_of(run.steps[i], PER_EPOCH)
        if e != epoch:
            # validation on the next line, erased; then the old epoch's bar with val_loss, reset, relabelled
            vtxt = pl_num(float(run.loss[i - 1] + 0.05))
            val_post = f", val_loss={vtxt}"
            parts.append("\n\rValidation: |          | 0/? [00:00<?, ?it/s]\x1b[A\n\rValidation: |          | 0/? [00:00<?, ?it/s]\x1b[A\n"
                         f"\rValidation DataLoader 0:   0%|          | 0/{val} [00:00<?, ?it/s]\x1b[A\n"
                         f"\rValidation DataLoader 0: 100%|██████████| {val}/{val} [00:04<00:00, 24.10it/s]\x1b[A\n"
                         "\r" + " " * 73 + "\x1b[A")
            full = post + val_post
            parts.append("\r" + _meter(f"Epoch {epoch}", total, total, total / 8.0, full))
            parts.append("\r" + _meter(f"Epoch {epoch}", total, total, total / 8.0, full))
            reset = f"Epoch {epoch}:   0%|          | 0/{total} [00:00<?, ?it/s, {full}]"
            parts.append("\r" + reset + " " * 10)
            parts.append(f"\rEpoch {e}:   0%|          | 0/{total} [00:00<?, ?it/s, {full}]")
            epoch = e
        v = run.loss[i]
        if v1:
            lastl = run.show(i, f"{v:.3g}")
            new_post = f"loss={lastl}, v_num=0"
        else:
            lastl = run.show(i, pl_num(float(v)))
            new_post = f"v_num=0, train_loss={lastl}"
        parts.append("\r" + _meter(f"Epoch {e}", b, total, b / 8.0, post + val_post))  # stale postfix first
        post = new_post
        parts.append("\r" + _meter(f"Epoch {e}", b, total, b / 8.0, post + val_post))
    _, b_last = _epoch_of(run.steps[-1], PER_EPOCH)
    if b_last == total:
        parts.append("`Trainer.fit` stopped: `max_epochs=" + str(epoch + 1) + "` reached.\n")
    else:  # the run ends inside an epoch: max_steps, and the bar closes where it stands (tqdm's close)
        parts.append("`Trainer.fit` stopped: `max_steps=" + str(run.steps[-1]) + "` reached.\n")
    parts.append("\r" + _meter(f"Epoch {epoch}", b_last, total, b_last / 8.0, post + val_post) + "\n")
    return "\n".join(head) + "\n" + "".join(parts)


def nemo_bar(run: Run) -> str:
    """NeMo's MegatronProgressBar over max_steps: one line of redraws.

    ``on_train_batch_end`` redraws at the new n (``_update_n``) and only then stores the metrics with
    ``set_postfix(..., refresh=False)``: every redraw shows the metrics of the *previous* update, so the loss printed
    beside n belongs to the previous logged step; the end-of-epoch refresh finally shows the last one at the last n.
    The MANIFEST numbers each loss by the ``global_step`` printed beside it (``trainer.global_step`` logged in the
    same training_step: the loss's own step, 0-based), not by the bar's n, which runs one update ahead; the closing
    redraw prints it through tqdm's 3-significant-digit format_num (``4e+3`` for 3999), recorded as printed.
    """
    head = ["[NeMo I 2026-03-02 09:14:05 nemo_logging:393] Rank 0 has data parallel group : [0, 1, 2, 3, 4, 5, 6, 7]",
            "[NeMo I 2026-03-02 09:14:05 megatron_init:314] All data parallel group ranks: [[0, 1, 2, 3, 4, 5, 6, 7]]",
            "[NeMo I 2026-03-02 09:14:21 nlp_overrides:1118] Model GPTModel was successfully restored.",
            "[NeMo I 2026-03-02 09:14:22 modelPT:786] Optimizer config = MegatronDistributedFusedAdam (",
            "    lr: 0.0003", "    weight_decay: 0.1", "    )"]
    parts = []
    post = ""

    def postfix(j: int, loss_txt: str) -> str:
        s = run.steps[j]
        return (f"reduced_train_loss={loss_txt}, global_step={pl_num(float(s - 1))}, consumed_samples={pl_num(float(s * 256))}, "
                f"train_step_timing in s={pl_num(0.412 + 0.005 * ((s * 7919) % 5 - 2) / 2)}")

    for i in range(run.n):
        s = run.steps[i]
        if i:  # shown beside n: the previous update's value, with the global_step logged with it
            run.show(i - 1, pl_num(float(run.loss[i - 1])), step=int(float(pl_num(float(run.steps[i - 1] - 1)))))
        parts.append("\r" + _meter("Epoch 0", s, run.total, s * 0.42, post, rate=False))
        post = postfix(i, pl_num(float(run.loss[i])))
        if s % 500 == 0:
            parts.append(f"\n[NeMo I 2026-03-02 10:{s // 100:02d}:00 nemo_model_checkpoint:497] Checkpoint save for step "
                         f"{s} started at 1772444400.0.\n")
    last = run.steps[-1]
    shown = int(float(pl_num(float(last - 1))))  # the end-of-epoch refresh: the last value, its global_step
    run.show(run.n - 1, pl_num(float(run.loss[-1])), step=shown)
    run.printed = [p for k, p in enumerate(run.printed) if not (p[0] == shown and k < len(run.printed) - 1)]
    parts.append("\r" + _meter("Epoch 0", last, run.total, last * 0.42, post, rate=False))
    run.event_steps = [(k.value, run.steps[j] - 1) for k, j in run.onsets()]
    return "\n".join(head) + "\n" + "".join(parts) + "\n"


def nemo2_printer(run: Run) -> str:
    """NeMo 2's ProgressPrinter lines (``Training epoch 0, iteration 9/4999 | ...``)."""
    out = ["[NeMo I 2026-03-02 09:14:05 nemo_logging:393] Experiments will be logged at /results/llama3_8b/2026-03-02_09-14-05",
           "[NeMo W 2026-03-02 09:14:05 nemo_logging:405] \"update_logger_directory\" is True. Overwriting tensorboard logger \"save_dir\" to /results/tb_logs",
           "[NeMo I 2026-03-02 09:14:41 nemo_logging:393] Padded vocab_size: 128256, original vocab_size: 128256, dummy tokens: 0.",
           "[NeMo I 2026-03-02 09:14:52 nemo_logging:393] Setting up optimizer with config OptimizerConfig(optimizer='adam', lr=0.0003, ...)"]
    for i in range(run.n):
        n = run.steps[i] + 1
        loss = run.show(i, f"{run.loss[i]:.4}")
        out.append(f"Training epoch 0, iteration {n - 1}/{run.total} | lr: {run.lr(n):.4} | global_batch_size: 512 | "
                   f"global_step: {n - 1} | reduced_train_loss: {loss} | train_step_timing in s: {3.1 + run.rng.uniform(-0.05, 0.05):.4} | "
                   f"consumed_samples: {n * 512}")
        if n % 500 == 0:
            out.append("Validation: iteration 1/32")
            out.append("Validation: iteration 32/32")
            out.append(f"Epoch 0, global step {n - 1}: 'val_loss' reached {run.loss[i] + 0.05:.5f} (best {run.loss[i] + 0.05:.5f}), "
                       f"saving model to '/results/checkpoints/model--val_loss={run.loss[i] + 0.05:.2f}-step={n - 1}-consumed_samples={n * 512}.0.ckpt' as top 1")
    return "\n".join(out) + "\n"


FIXTURES = [
    Spec("lightning1__healthy.log", "Lightning 1.x", PL1, "epoch*batch", "loss", lambda r: lightning(r, True),
         points=300, interval=20, seed=601,
         notes="one \\r-joined line per epoch; step = epoch*1000 + n; each n is drawn twice, first with the previous loss "
               "(stale) then the new one; the end-of-epoch redraw repeats the last point with val_loss; "
               "'loss=' is the (running-mean) loss as a string with 3 significant digits, then v_num"),
    Spec("lightning1__nan.log", "Lightning 1.x", PL1, "epoch*batch", "loss", lambda r: lightning(r, True),
         points=220, interval=20, seed=602, events=(Event(EventKind.NONFINITE, 0.7),),
         notes="loss=nan in the postfix from the onset on"),
    Spec("lightning2__spike.log", "Lightning 2.x", PL2, "epoch*batch", "train_loss", lambda r: lightning(r, False),
         points=300, interval=20, seed=603, events=(Event(EventKind.SPIKE, 0.45),),
         notes="the whole fit is one physical line of \\r redraws (the bar is reset each epoch); each n drawn twice: stale "
               "postfix, then 'v_num=0, train_loss=2.340' (padded to 5 chars); validation bars on the next line with "
               "ESC[A, erased; val_loss joins the postfix after each epoch"),
    Spec("lightning2__healthy.log", "Lightning 2.x", PL2, "epoch*batch", "train_loss", lambda r: lightning(r, False),
         points=250, interval=20, seed=604, notes="healthy; val_loss appears in the postfix after each epoch"),
    Spec("lightning2__nan.log", "Lightning 2.x", PL2, "epoch*batch", "train_loss", lambda r: lightning(r, False),
         points=200, interval=20, seed=609, events=(Event(EventKind.NONFINITE, 0.6),),
         notes="Lightning pads the postfix number to 5 characters, so a NaN loss prints as 'train_loss=nan.0'"),
    Spec("nemo_bar__divergence.log", "NeMo (MegatronProgressBar)", NEMO_BAR, "global_step", "reduced_train_loss", nemo_bar,
         points=400, interval=10, seed=605, events=(Event(EventKind.DIVERGENCE, 0.7),),
         notes="tqdm bar over max_steps without rate; postfix reduced_train_loss=..., global_step=99.00 (padded float); the "
               "postfix beside n is the previous update's (set_postfix(refresh=False)): losses and events show one logged "
               "point late; each loss is numbered by the global_step printed beside it"),
    Spec("nemo_bar__healthy.log", "NeMo (MegatronProgressBar)", NEMO_BAR, "global_step", "reduced_train_loss", nemo_bar,
         points=200, interval=10, seed=608, notes="healthy; checkpoint lines break the \\r line every 500 steps"),
    Spec("nemo2__healthy.log", "NeMo 2", NEMO2, "global_step", "reduced_train_loss", nemo2_printer, points=350,
         interval=10, first=9, seed=606,
         notes="'Training epoch 0, iteration N/M | ... | global_step: N | reduced_train_loss: X' ({:.4} = 4 significant "
               "digits); iteration and global_step are 0-based (n-1)"),
    Spec("nemo2__nan.log", "NeMo 2", NEMO2, "global_step", "reduced_train_loss", nemo2_printer, points=300,
         interval=10, first=9, seed=607, events=(Event(EventKind.SPIKE, 0.3), Event(EventKind.NONFINITE, 0.8)),
         notes="a spike, then reduced_train_loss: nan"),
]
