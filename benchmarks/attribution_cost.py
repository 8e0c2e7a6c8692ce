"""Cost of naming the samples of a spike: a withheld step with attribution vs without.

The subject is the tiny GPT (``lossguard.demo.model``, 434,816 parameters, 64-token rows) at
several batch sizes, in a plain guarded loop. For each batch size it times, interleaved round-robin
(so load changes on the shared machine hit all alike), the median of:

- ``step``: a training step as the loop runs it (forward, backward, ``guard.step``): what a withheld
  step costs without naming.
- ``name by loss``: :meth:`SampleNamer.name` with ``NameMethod.LOSS`` (one forward of the batch,
  no autograd).
- ``name by gradient``: ``NameMethod.GRADIENT`` (the bisection), on a batch where one row carries
  the spike (its per-row loss is weighted x1000 through the batch, so the bisection follows
  exactly one group per level, the common case; cost grows by ``1/groups`` of a pass per extra
  followed group).

It prints the times and the ratio ``(step + naming) / step``: the price of a spike step with naming.
Naming runs only on withheld steps; a good step costs nothing extra (the batch is kept by
reference, and the RNG state is captured only where the replay check already captures it).

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/attribution_cost.py [--batches 16,64 --rounds 7]``.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from lossguard.guard import GuardConfig, StabilityGuard
from lossguard.guard.sample_namer import NameMethod, SampleAttribution
from lossguard.demo.model import GPTConfig, TinyGPT

LOUD_ROW = 3


def row_loss(model, batch):
    """Per-row mean token cross-entropy of the tiny GPT, times the batch's per-row ``weight``
    (1000 on a row that carries the spike, 1 elsewhere)."""
    x, y, weight = batch
    logits, _ = model(x)
    tok = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="none")
    return tok.view(y.shape).mean(dim=1) * weight


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="16,64")
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    torch.set_num_threads(1)
    cfg = GPTConfig()
    print(f"tiny GPT, {sum(p.numel() for p in TinyGPT(cfg).parameters()):,} parameters, {cfg.block_size}-token rows; "
          f"median of {a.rounds} rounds, wall seconds")
    print(f"{'batch':>6} {'step':>8} {'name:loss':>10} {'name:grad':>10} {'passes(grad)':>13} "
          f"{'spike step x (loss)':>20} {'spike step x (grad)':>20}")
    for b in (int(s) for s in a.batches.split(",")):
        torch.manual_seed(0)
        model = TinyGPT(cfg)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        guard = StabilityGuard(model, opt, config=GuardConfig(checkpoint_every=None, log_metrics=False))
        g = torch.Generator().manual_seed(b)
        seq = torch.randint(0, cfg.vocab_size, (b, cfg.block_size + 1), generator=g)
        weight = torch.ones(b)
        batch = (seq[:, :-1].contiguous(), seq[:, 1:].contiguous(), weight)
        weight = weight.clone()
        weight[LOUD_ROW] = 1000.0
        loud = (batch[0], batch[1], weight)
        namers = {m: SampleAttribution(per_sample_loss=row_loss, method=m) for m in NameMethod}
        from lossguard.guard.events import EventLog
        from lossguard.guard.sample_namer import SampleNamer
        from lossguard.recovery.ledger import RunLedger
        built = {m: SampleNamer.build(c, model=model, sampler=None, store=None, log=EventLog(None),
                                      ledger=lambda: RunLedger(), world=1) for m, c in namers.items()}
        times: dict[str, list[float]] = {"step": [], "loss": [], "grad": []}
        passes = []
        for _ in range(a.rounds):
            t = time.perf_counter()
            loss = row_loss(model, batch).mean()
            loss.backward()
            guard.step(loss)
            times["step"].append(time.perf_counter() - t)
            t = time.perf_counter()
            built[NameMethod.LOSS].name(step=0, batch_index=0, batch=loud)
            times["loss"].append(time.perf_counter() - t)
            t = time.perf_counter()
            rec = built[NameMethod.GRADIENT].name(step=0, batch_index=0, batch=loud)
            times["grad"].append(time.perf_counter() - t)
            passes.append(rec["passes"]["backward"])
            assert [s["row"] for s in rec["suspects"]] == [LOUD_ROW], rec
        m = {k: statistics.median(v) for k, v in times.items()}
        print(f"{b:>6} {m['step']:>8.4f} {m['loss']:>10.4f} {m['grad']:>10.4f} {statistics.median(passes):>13.3f} "
              f"{(m['step'] + m['loss']) / m['step']:>20.2f} {(m['step'] + m['grad']) / m['step']:>20.2f}")


if __name__ == "__main__":
    main()
