"""Naming on a run with nothing planted: which samples carry the spikes of a tiny GPT on real text?

The tiny GPT (``lossguard.demo.model``, width 64) trains on the shipped public-domain corpus
(``lossguard.demo``), cut into 65-byte rows (64 inputs + the shifted targets) read by a
:class:`ResumableSampler` (batch 16, shuffled), at a constant LR high enough that spikes happen on
their own (no warm-up, AdamW ``lr=3e-3``). The guard names the samples of every withheld step and
renders each as its text (the row's first 48 bytes). Prints the withheld steps with their suspects
and the share of the step's excess each carries, then ``lossguard analyze``'s summary of the log;
``--html FILE`` also writes the report (the suspects are under their incident).

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/attribution_natural.py [--steps 400 --html r.html]``.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from lossguard.data.sampler import ResumableSampler
from lossguard.demo.corpus import load_corpus
from lossguard.guard import GuardConfig, SampleAttribution, StabilityGuard
from lossguard.demo.model import GPTConfig, TinyGPT

ROW = 65


class Rows:
    """The corpus as non-overlapping 65-byte rows; ``rows[i] -> int64[65]``."""

    def __init__(self, data: bytes) -> None:
        self.t = torch.frombuffer(bytearray(data[: len(data) // ROW * ROW]), dtype=torch.uint8).long().view(-1, ROW)

    def __len__(self) -> int:
        return len(self.t)

    def __getitem__(self, i: int):
        return self.t[i]

    def text(self, i: int, n: int = 48) -> str:
        """The row's first ``n`` bytes as text (newlines shown as a pilcrow)."""
        return bytes(self.t[i, :n].tolist()).decode("utf-8", "replace").replace("\n", "\u00b6")


def row_loss(model, batch):
    """Each row's mean next-byte cross-entropy."""
    x, y = batch[:, :-1], batch[:, 1:]
    logits, _ = model(x)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                             reduction="none").view(y.shape).mean(dim=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--html", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    rows = Rows(load_corpus())
    sampler = ResumableSampler(len(rows), batch_size=16, seed=a.seed)
    loader = torch.utils.data.DataLoader(rows, batch_sampler=sampler)
    torch.manual_seed(a.seed)
    model = TinyGPT(GPTConfig(n_embd=64, dropout=0.0))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    log = Path(tempfile.mkdtemp()) / "natural.jsonl"
    guard = StabilityGuard(model, opt, sampler=sampler, log_path=log,
                           config=GuardConfig(checkpoint_every=None, halt_raises=False),
                           attribution=SampleAttribution(per_sample_loss=row_loss,
                                                         render=lambda key: rows.text(key.index)))
    for _, batch in guard.batches(loader, steps=a.steps):
        loss = row_loss(model, batch).mean()
        loss.backward()
        guard.step(loss)
    guard.close()
    recs = guard.namer.records
    print(f"{len(rows)} rows of {ROW} bytes; {a.steps} steps at lr {a.lr}; {len(recs)} withheld step(s)")
    named = [r for r in recs if r["suspects"]]
    print(f"named someone on {len(named)} of them; methods {sorted({r.get('method', '-') for r in recs})}")
    print(guard.namer.summary())
    from lossguard.analysis import analyze
    from lossguard.io import read_log
    from lossguard.report.text import render_text

    analysis = analyze(read_log(log))
    print(render_text(analysis))
    if a.html:
        from lossguard.report.html import write_html
        write_html(analysis, a.html)
        print(f"wrote {a.html}")


if __name__ == "__main__":
    main()
