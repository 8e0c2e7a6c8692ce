"""What the recomputing attention probes cost on CPU, and what reading one query in four misses.

The probes of ``nn.MultiheadAttention``, HF ``GPT2Attention`` and HF Llama attention recompute
``q k^T`` in a forward hook (:mod:`lossguard.guard.logit_recompute`). Two parts:

``cost``: one training step (forward, backward, ``AdamW``) of a model built from a config (no
download) timed in interleaved, shuffled blocks, by the thread's CPU time (a shared machine's other
load is not counted), the ways:

* ``plain``: no probe;
* ``before``: the probes of an older lossguard (``--before DIR``: a directory holding that version's
  ``lossguard`` package, e.g. ``git archive a60d605 src | tar -x -C /tmp/before``, then
  ``--before /tmp/before/src``), every forward, every query;
* ``exact``: this version, every query (``query_stride=1``): the fewer passes alone;
* ``every4``: this version, every query, every 4th forward (``every=4``, the cadence option);
* ``stride4``: this version's default: one query position in four, every forward.

Prints the median step time per way, the overhead against ``plain`` (median of per-round ratios), and
the CPU time spent inside the probes' hooks (a clock hook registered before and after each probe's:
the recompute alone, which the difference of two noisy step times blurs).

``error``: HF GPT-2 and Llama (built from a config) trained on a real text (``--corpus``: lossguard's
demo prose, or CPython's pydoc topics, which nothing here was tuned on) at a stable and an unstable
LR. On every step the exact per-head maximum (every query) and the default one (one query in four)
are both taken from the same forward; printed: their ratio (median, 5th percentile, smallest) over
the heads of every layer and step, and, for the largest logit of the step (what the treatment and
``analyze`` read), the step the growth test (10x in 20 steps above 10) first fires and the first
step above 100, from each series.

    python benchmarks/probe_cost.py cost --models mha gpt2 llama --blocks 8 [--before DIR]
    python benchmarks/probe_cost.py error --corpus demo --steps 150
"""
from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from gpu_overhead import EncoderLM  # noqa: E402  (a sibling script: benchmarks/ is on sys.path)

WAYS = ("plain", "before", "exact", "every4", "stride4")


def make_model(kind: str, layers: int, width: int, heads: int, seq: int) -> nn.Module:
    """A model whose attention lossguard probes by recomputing (dropout off: forwards repeat)."""
    torch.manual_seed(0)
    if kind == "mha":
        return EncoderLM(layers, width, heads, seq)
    import transformers
    if kind == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=256, n_positions=seq, n_embd=width, n_layer=layers, n_head=heads,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
        return transformers.GPT2LMHeadModel(cfg)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=width, intermediate_size=4 * width,
                                   num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads // 2,
                                   max_position_embeddings=seq, bos_token_id=0, eos_token_id=0)
    return transformers.LlamaForCausalLM(cfg)


def logits_of(model, x):
    out = model(x)
    return out if isinstance(out, torch.Tensor) else out.logits


def _load_before(path: str):
    """``find_attention`` of the lossguard package under ``path``, imported as ``lossguard_before``."""
    spec = importlib.util.spec_from_file_location("lossguard_before", f"{path}/lossguard/__init__.py",
                                                  submodule_search_locations=[f"{path}/lossguard"])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["lossguard_before"] = mod
    spec.loader.exec_module(mod)
    return importlib.import_module("lossguard_before.guard.attention_probe").find_attention


def cost(a) -> None:
    from lossguard.guard.attention_probe import find_attention

    before = _load_before(a.before) if a.before else None
    ways = [w for w in WAYS if w != "before" or before is not None]
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 256, (a.batch, a.seq), generator=g) for _ in range(a.steps)]
    for kind in a.models:
        setups = {}
        for w in ways:
            model = make_model(kind, a.layers, a.width, a.heads, a.seq).train()
            if w == "before":
                probes = before(model)
            elif w != "plain":
                probes = find_attention(model, every=4 if w == "every4" else 1, query_stride=4 if w == "stride4" else 1)
            inside = [0.0]
            if w != "plain":
                for p in probes:  # a clock around the probe's hook: registered first and last
                    p.module.register_forward_hook(lambda *_, c=inside: c.append(-time.thread_time()), prepend=True)
                    p.module.register_forward_hook(lambda *_, c=inside: c.append(c.pop() + time.thread_time()))
            setups[w] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4), inside)

        def block(w, setups=setups):
            model, opt, inside = setups[w]
            inside[:] = [0.0]
            c = time.thread_time()
            for x in batches:
                F.cross_entropy(logits_of(model, x).flatten(0, 1), x.roll(-1, 1).flatten()).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            return (time.thread_time() - c) / len(batches), sum(inside) / len(batches)

        for w in ways:
            block(w)  # warm-up
        times: dict[str, list[float]] = {w: [] for w in ways}
        hooks: dict[str, list[float]] = {w: [] for w in ways}
        order, rng = list(ways), random.Random(0)
        for _ in range(a.blocks):
            rng.shuffle(order)
            for w in order:
                t, h = block(w)
                times[w].append(t)
                hooks[w].append(h)
        print(f"\n### {kind}: {a.layers} layers, width {a.width}, {a.heads} heads, batch {a.batch} x {a.seq}; "
              f"plain {1e3 * statistics.median(times['plain']):.1f} ms/step (CPU, {a.blocks} rounds of {a.steps})")
        print("| way | ms/step | vs plain | in the probes' hooks | hooks / plain step |")
        print("|---|---:|---:|---:|---:|")
        for w in ways:
            r = statistics.median(t / p for t, p in zip(times[w], times["plain"], strict=True))
            h = statistics.median(hooks[w])
            print(f"| {w} | {1e3 * statistics.median(times[w]):.1f} | {100 * (r - 1):+.1f}% | {1e3 * h:.1f} ms "
                  f"| {100 * h / statistics.median(times['plain']):.1f}% |")


def _first_growth(steps: list[int], largest: list[float]) -> int | None:
    from lossguard.guard.logit_growth import LogitGrowth

    g = LogitGrowth(window=20, factor=10.0, floor=10.0)
    return next((s for s, v in zip(steps, largest, strict=True) if g.update(s, v) is not None), None)


def error(a) -> None:
    from lossguard.guard.attention_probe import HEAD_MAX_ATTR, AttentionProbe, find_attention
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from natural_corpora import load

    data = torch.frombuffer(bytearray(load(a.corpus)), dtype=torch.uint8).long()
    print(f"corpus {a.corpus}: {len(data)} bytes; {a.layers} layers, width {a.width}, {a.heads} heads, "
          f"batch {a.batch} x {a.seq}, AdamW, {a.steps} steps, 10-step warm-up")
    print("| model | LR | heads: ratio median / 5th pct / smallest | heads above 10: the same | step's largest: "
          "median / smallest | largest exact | growth fires (exact / stride 4 / every 4) "
          "| first > 100 (exact / stride 4 / every 4) |")
    print("|---|---:|---|---|---|---:|---|---|")
    for kind in ("gpt2", "llama"):
        for lr in a.lrs:
            model = make_model(kind, a.layers, a.width, a.heads, a.seq).train()
            probes = find_attention(model)  # the default: one query in four
            exact = {p.module: AttentionProbe(p.module, p.name, query_stride=1) for p in probes}
            pairs: list[tuple[list[float], list[float]]] = []
            for p in probes:  # after the default probe's hook: the exact value of the same forward
                def both(module, args, kwargs, out, exact=exact, pairs=pairs):
                    strided = getattr(module, HEAD_MAX_ATTR).clone()
                    e = exact[module]
                    e._hook(module, args, kwargs, out)
                    pairs.append((strided.tolist(), getattr(module, HEAD_MAX_ATTR).tolist()))
                    setattr(module, HEAD_MAX_ATTR, strided)
                e = exact[p.module]
                e.remove()
                p.module.register_forward_hook(both, with_kwargs=True)
            opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95))
            g = torch.Generator().manual_seed(1)
            ratios, big, small, steps = [], [], [], []
            for step in range(a.steps):
                for group in opt.param_groups:
                    group["lr"] = lr * min(1.0, (step + 1) / 10)
                i = torch.randint(0, len(data) - a.seq - 1, (a.batch,), generator=g)
                x = torch.stack([data[j:j + a.seq + 1] for j in i.tolist()])
                pairs.clear()
                F.cross_entropy(logits_of(model, x[:, :-1]).flatten(0, 1), x[:, 1:].flatten()).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
                for s_heads, e_heads in pairs:
                    ratios += [(s / e, e) for s, e in zip(s_heads, e_heads, strict=True) if e > 1.0]
                steps.append(step)
                small.append(max(max(s) for s, _ in pairs))
                big.append(max(max(e) for _, e in pairs))
            held = [big[s - s % 4] for s in steps]  # every=4: the exact value of every 4th forward, held
            above = [next((s for s, v in zip(steps, ser, strict=True) if v > 100), None) for ser in (big, small, held)]
            grow = [_first_growth(steps, ser) for ser in (big, small, held)]
            step_r = [sm / b for sm, b in zip(small, big, strict=True)]
            spread = _spread([r for r, _ in ratios]), _spread([r for r, e in ratios if e > 10])
            print(f"| {kind} | {lr:g} | {spread[0]} | {spread[1]} "
                  f"| {statistics.median(step_r):.4f} / {min(step_r):.4f} | {max(big):.4g} "
                  f"| {' / '.join(map(str, grow))} | {' / '.join(map(str, above))} |")


def _spread(r: list[float]) -> str:
    if len(r) < 2:
        return "-"
    return f"{statistics.median(r):.4f} / {statistics.quantiles(r, n=20)[0]:.4f} / {min(r):.4f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("part", choices=["cost", "error"])
    ap.add_argument("--models", nargs="+", choices=["mha", "gpt2", "llama"], default=["mha", "gpt2", "llama"])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--blocks", type=int, default=8, help="cost: rounds of interleaved blocks")
    ap.add_argument("--steps", type=int, default=3, help="cost: steps per block; error: training steps")
    ap.add_argument("--before", help="cost: directory holding an older lossguard package")
    ap.add_argument("--corpus", choices=["demo", "pydoc"], default="demo")
    ap.add_argument("--lrs", nargs="+", type=float, default=[1e-3, 3e-2])
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    (cost if a.part == "cost" else error)(a)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
