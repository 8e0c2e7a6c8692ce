"""Cost of the guard and of the precursor statistics on a CUDA device (issues 20 and 23).

Times one training step four ways, in interleaved blocks, with CUDA events (no host clock around
asynchronous work):

* ``plain``: forward, backward, ``clip_grad_norm_(1.0)``, ``torch.optim.AdamW.step()`` (foreach);
* ``plain_fused``: the same with ``AdamW(fused=True)``;
* ``guard``: the same through :class:`StabilityGuard` with :class:`SkipStepAdamW`, device statistics,
  the device gate and the deferred host read (``max_grad_norm=1.0``; no checkpoints);
* ``guard_precursors``: + every precursor statistic (attention logits per head, output logits, update
  ratio, Adam's ratio), read with the verdict in the guard's one deferred transfer;
* ``guard_treatment``: + the opt-in :class:`PrecursorTreatment` (its host side runs every step).

Shapes: ``small`` (the natural-instability benchmark's mild model: 3 layers, width 64, batch 16 x 64;
launch-bound on a GPU), ``gpt2`` (12 layers, width 768, 12 heads, batch 8 x 1024, bf16 autocast,
the shipped attention, which records its logits while it attends) and ``mha`` (12
``nn.TransformerEncoderLayer`` of width 768 over ``nn.MultiheadAttention``, whose logits the probe's
forward hook recomputes, same batch and precision). Prints per shape the median step time of each
way and the overhead against ``plain`` (median of per-block ratios).

    python benchmarks/gpu_overhead.py [--shapes small gpt2 mha] [--blocks 12] [--steps 10] [--profile]

``--profile`` also prints, per shape, where the host time of the fullest way (``guard_treatment``)
goes: cProfile's top functions over one block (on a GPU the guard's cost is host time spent
launching kernels, so the host profile is the one that locates it).

Without CUDA it says so and exits 0 (nothing to measure).
"""
from __future__ import annotations

import argparse
import random
import statistics

import torch
import torch.nn.functional as F
from torch import nn

KINDS = ("plain", "plain_fused", "guard", "guard_precursors", "guard_treatment")


class EncoderLM(nn.Module):
    """A causal LM over ``nn.TransformerEncoderLayer`` (so over ``nn.MultiheadAttention``)."""

    def __init__(self, layers: int, width: int, heads: int, seq: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(256, width)
        self.pos = nn.Parameter(torch.zeros(seq, width))
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                                               batch_first=True, norm_first=True)
                                    for _ in range(layers))
        self.head = nn.Linear(width, 256)

    def forward(self, x, y=None):
        """``(logits, loss)`` as the shipped TinyGPT returns them; the logits alone without targets."""
        h = self.emb(x) + self.pos[: x.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        for layer in self.layers:
            h = layer(h, src_mask=mask, is_causal=True)
        logits = self.head(h)
        if y is None:
            return logits
        return logits, F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())


SHAPES = {
    "small": dict(kind="gpt", layers=3, width=64, heads=4, batch=16, seq=64, bf16=False),
    "gpt2": dict(kind="gpt", layers=12, width=768, heads=12, batch=8, seq=1024, bf16=True),
    "mha": dict(kind="mha", layers=12, width=768, heads=12, batch=8, seq=1024, bf16=True),
}


def build(shape: dict, kind: str):
    """(model, step function) for one way of stepping."""
    from lossguard.demo.model import GPTConfig, TinyGPT
    from lossguard.guard import GuardConfig, SkipStepAdamW, StabilityGuard
    from lossguard.guard.treatment import PrecursorTreatment

    torch.manual_seed(0)
    if shape["kind"] == "gpt":
        model = TinyGPT(GPTConfig(n_layer=shape["layers"], n_head=shape["heads"], n_embd=shape["width"],
                                  block_size=shape["seq"]))
    else:
        model = EncoderLM(shape["layers"], shape["width"], shape["heads"], shape["seq"])
    model = model.cuda()
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=shape["bf16"])

    def loss_of(x, y):
        with autocast:
            return model(x, y)[1]

    if kind.startswith("plain"):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), fused=kind == "plain_fused" or None)

        def step(x, y):
            loss_of(x, y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step

    guard = StabilityGuard(model, SkipStepAdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95)),
                           config=GuardConfig(checkpoint_every=None, stats="device", gate="device",
                                              defer_host_read=True, max_grad_norm=1.0, replay=False),
                           precursors=True if kind != "guard" else None,
                           treatment=PrecursorTreatment() if kind == "guard_treatment" else None)

    def step(x, y):
        loss = loss_of(x, y)
        loss.backward()
        guard.step(loss)
    return step


def time_block(step, batches) -> float:
    """Milliseconds per step of one block, by CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for x, y in batches:
        step(x, y)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / len(batches)


def measure(name: str, shape: dict, blocks: int, steps: int) -> dict[str, list[float]]:
    """Per-block step times of every way for one shape."""
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(steps):
        x = torch.randint(0, 256, (shape["batch"], shape["seq"]), generator=g)
        batches.append((x.cuda(), x.roll(-1, dims=1).cuda()))
    ways = {k: build(shape, k) for k in KINDS}
    for k in KINDS:  # warm-up: allocator, cuBLAS handles, the guard's first steps
        time_block(ways[k], batches)
        time_block(ways[k], batches)
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    order, rng = list(KINDS), random.Random(0)
    for _ in range(blocks):
        rng.shuffle(order)
        for k in order:
            times[k].append(time_block(ways[k], batches))
    plain = statistics.median(times["plain"])
    print(f"\n### {name}: {shape}; plain step {plain:.2f} ms (median of {blocks} blocks of {steps} steps)")
    print("| way | ms/step | vs plain | vs guard |")
    print("|---|---:|---:|---:|")
    for k in KINDS:
        r = statistics.median(t / p for t, p in zip(times[k], times["plain"], strict=True))
        rg = statistics.median(t / p for t, p in zip(times[k], times["guard"], strict=True))
        print(f"| {k} | {statistics.median(times[k]):.3f} | {100 * (r - 1):+.2f}% | {100 * (rg - 1):+.2f}% |")
    del ways
    torch.cuda.empty_cache()
    return times


def profile(name: str, shape: dict, steps: int, top: int = 14) -> None:
    """cProfile of one block of ``guard_treatment`` steps: the functions with the most own time."""
    import cProfile
    import io
    import pstats

    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (shape["batch"], shape["seq"]), generator=g).cuda()
    batches = [(x, x.roll(-1, dims=1))] * steps
    step = build(shape, "guard_treatment")
    time_block(step, batches)
    prof = cProfile.Profile()
    prof.enable()
    time_block(step, batches)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    print(f"\n### host profile, {name}, guard_treatment, {steps} steps")
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["small", "gpt2", "mha"])
    ap.add_argument("--blocks", type=int, default=12)
    ap.add_argument("--steps", type=int, default=10, help="steps per block")
    ap.add_argument("--profile", action="store_true", help="also a host profile of the fullest way per shape")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return 0
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name in a.shapes:
        measure(name, SHAPES[name], a.blocks, a.steps)
        if a.profile:
            profile(name, SHAPES[name], a.steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
