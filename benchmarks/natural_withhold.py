"""What do a few withheld updates cost a natural-instability run, and how much is float noise?

The clip-only run of ``natural_instability.py`` (same preset, LR, seed, data, schedule, clip 1.0),
with the updates of ``--withhold`` steps withheld the way the guard withholds them (the optimizer
does not step; the LR schedule advances; the batch is consumed), and/or the model's first parameter
scaled by ``1 + K * 1e-7`` after initialisation (``--perturb K``: a float-noise sibling, to size the
run's own chaos). Prints the final held-out loss and the training loss around the withheld steps.

Question it answers (issue 20, harsh preset, best LR 3e-3, seed 0): the guard's judge withholds
steps 21-22 (a warm-up loss spike) and ends 0.016 above clip only. Is that the spike's cure being
withheld, any two withheld warm-up steps, or noise?

    python benchmarks/natural_withhold.py --preset harsh --lr 3e-3 --seed 0 --withhold 21,22
    python benchmarks/natural_withhold.py --preset harsh --lr 3e-3 --seed 0 --withhold 30,31
    python benchmarks/natural_withhold.py --preset harsh --lr 3e-3 --seed 0 --perturb 1
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import natural_instability as ni  # noqa: E402
from lossguard.demo.corpus import CorpusBatches  # noqa: E402


def run(preset: str, lr: float, seed: int, withhold: set[int], perturb: int = 0) -> tuple[float, list[float]]:
    """Final held-out loss and per-step training losses of the clip-only run, ``withhold`` withheld."""
    torch.set_num_threads(1)
    p = ni.PRESETS[preset]
    steps = p["steps"]
    data = CorpusBatches(ni.load(p["corpus"]), batch_size=p["batch_size"], seq_len=p["seq_len"], seed=1000 + seed)
    val = data.val_batches(8)
    model = ni.build("clip", seed, p["n_layer"], p["n_embd"], p["n_head"], block_size=p["seq_len"])
    if perturb:
        with torch.no_grad():
            next(model.parameters()).mul_(1 + perturb * 1e-7)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=p["weight_decay"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: ni.lr_at(s, steps, lr) / lr)
    losses = []
    for step in range(steps):
        x, y = data.batch(step)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if step not in withhold:
            opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    return ni.held_out(model, val), losses


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(ni.PRESETS), default="harsh")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--withhold", default="", help="comma-separated steps whose update is withheld")
    ap.add_argument("--perturb", type=int, default=0, help="K: first parameter x (1 + K * 1e-7)")
    a = ap.parse_args(argv)
    withhold = {int(s) for s in a.withhold.split(",") if s}
    final, losses = run(a.preset, a.lr, a.seed, withhold, a.perturb)
    first = min(withhold, default=20)
    lo = max(0, first - 2)
    print(f"{a.preset} lr={a.lr:g} seed={a.seed} withhold={sorted(withhold)} perturb={a.perturb}: final {final:.6f}; "
          f"training loss at steps {lo}-{lo + 6}: " + " ".join(f"{x:.3f}" for x in losses[lo:lo + 7]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
