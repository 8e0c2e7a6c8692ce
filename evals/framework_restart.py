"""A real HF Trainer / Lightning run with a bad-data pocket, guarded, recovering through a restart.

The script a user would write, plus a pocket of bad batches: the guard's callback sees the episode,
books a rollback in the run ledger and exits with ``ExitCode.ROLLBACK`` (75); ``torchrun
--max-restarts`` runs the same command again, which resumes from the ledger's checkpoint
(``resume_checkpoint``) and has the booked batches withheld. Run::

    torchrun --standalone --nproc-per-node 1 --max-restarts 2 -m evals.framework_restart \\
        hf --out-dir run --steps 300 --pocket 200 210

The model is a tiny byte-level GPT trained on windows of the demo corpus. The batch of optimizer
step ``s`` is a pure function of ``s`` (the frameworks' own samplers are bypassed on purpose), so a
batch index is the step and a resumed run sees exactly the batches the first attempt saw. The
pocket replaces the targets of its steps' batches by one constant byte: a loss far above the
baseline and a gradient that drags every output toward that byte. At the end the script writes
``<out-dir>/result.json`` with the held-out loss (clean windows the run never trained on) and the
restart count.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import resources
from pathlib import Path

BLOCK, BATCH = 32, 8


def _args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("framework", choices=["hf", "lightning"])
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--save-every", type=int, default=25)
    ap.add_argument("--pocket", type=int, nargs=2, default=None, metavar=("START", "STOP"),
                    help="half-open range of steps whose batches are bad")
    ap.add_argument("--no-guard", action="store_true")
    return ap.parse_args(argv)


class Windows:
    """Batch of step ``s``: BATCH windows of BLOCK+1 bytes of the demo corpus at positions fixed by ``s``."""

    def __init__(self) -> None:
        import torch

        raw = resources.files("lossguard.demo").joinpath("corpus.txt").read_bytes()  # the demo's shipped corpus
        self.data = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()
        self.span = len(self.data) - BLOCK - 1

    def batch(self, step: int, *, held_out: bool = False):
        import torch

        base = 10**6 if held_out else 0
        starts = [((base + step * BATCH + i) * 7919) % self.span for i in range(BATCH)]
        rows = torch.stack([self.data[s:s + BLOCK + 1] for s in starts])
        return rows[:, :-1], rows[:, 1:]


def _guard_config():
    from lossguard.detect.outlier import OutlierConfig
    from lossguard.guard import GuardConfig
    from lossguard.recovery import RecoveryRecipe

    det = OutlierConfig(min_points=20)
    return GuardConfig(loss=det, grad_norm=det, recipe=RecoveryRecipe(rollback_distance=20, skip_margin=10))


def _model():
    import torch

    from lossguard.demo.model import GPTConfig, TinyGPT

    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(n_layer=1, n_head=2, n_embd=48, block_size=BLOCK))
    # Untied output layer: HF saves with safetensors, which refuses tensors that share memory.
    model.lm_head.weight = torch.nn.Parameter(model.wte.weight.detach().clone())
    return model


def _held_out_loss(model, windows) -> float:
    import torch

    model.eval()
    with torch.no_grad():
        losses = [float(model(*windows.batch(k, held_out=True))[1]) for k in range(16)]
    return sum(losses) / len(losses)


def _bad(args, step: int) -> bool:
    return args.pocket is not None and args.pocket[0] <= step < args.pocket[1]


def run_hf(args, out: Path, windows) -> float:
    import torch
    import transformers

    from lossguard.integrations.hf import StabilityCallback, resume_checkpoint

    class StepKeyed(torch.nn.Module):
        """The model fed the batch of the optimizer step in flight (``step`` set by a callback)."""

        def __init__(self) -> None:
            super().__init__()
            self.lm, self.step = _model(), 0

        def forward(self, idx=None, **_):
            x, y = windows.batch(self.step)
            if _bad(args, self.step):
                y = torch.zeros_like(y)
            return {"loss": self.lm(x, y)[1]}

    class Step(transformers.TrainerCallback):
        def on_step_begin(self, a, state, control, model=None, **kw):
            model.step = state.global_step

    model = StepKeyed()
    targs = transformers.TrainingArguments(
        output_dir=str(out), max_steps=args.steps, per_device_train_batch_size=1, learning_rate=3e-3,
        lr_scheduler_type="constant", save_strategy="steps", save_steps=args.save_every, logging_strategy="no",
        report_to=[], use_cpu=True, dataloader_num_workers=0, disable_tqdm=True, seed=0,
        remove_unused_columns=False)
    callbacks = [Step()] + ([] if args.no_guard else
                            [StabilityCallback(_guard_config(), log_path=out / "guard.jsonl")])
    trainer = transformers.Trainer(model=model, args=targs, train_dataset=[{"idx": i} for i in range(args.steps)],
                                   data_collator=lambda feats: {"idx": torch.tensor([f["idx"] for f in feats])},
                                   callbacks=callbacks)
    trainer.train(resume_from_checkpoint=resume_checkpoint(out))
    return _held_out_loss(model.lm, windows)


def run_lightning(args, out: Path, windows) -> float:
    import lightning.pytorch as pl
    import torch

    from lossguard.integrations.lightning import StabilityCallback, resume_checkpoint

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.lm = _model()

        def training_step(self, batch, batch_idx):
            step = self.trainer.global_step
            x, y = windows.batch(step)
            if _bad(args, step):
                y = torch.zeros_like(y)
            return self.lm(x, y)[1]

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-3)

    module = Module()
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=str(out), filename="{step}", every_n_train_steps=args.save_every,
                                        save_top_k=-1)
    callbacks = [ckpt] + ([] if args.no_guard else [StabilityCallback(_guard_config(), log_path=out / "guard.jsonl")])
    trainer = pl.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=False, callbacks=callbacks,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    loader = torch.utils.data.DataLoader(list(range(args.steps)), batch_size=1)
    trainer.fit(module, loader, ckpt_path=resume_checkpoint(out))
    return _held_out_loss(module.lm, windows)


def main(argv=None) -> int:
    import torch

    args = _args(argv)
    torch.set_num_threads(1)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    windows = Windows()
    loss = (run_hf if args.framework == "hf" else run_lightning)(args, out, windows)
    (out / "result.json").write_text(json.dumps({"held_out_loss": loss,
                                                 "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
