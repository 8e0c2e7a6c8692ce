"""Deterministic settings in which the tiny GPT really becomes unstable, and the loop that runs them.

Model: :data:`DEMO_MODEL` (2 layers, width 64, 4 heads, bytes; 119,104 parameters), AdamW
(betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices), lr 3e-3 with 50 warm-up steps and cosine
decay to 10 %, batch 16 x 64 bytes, 400 steps, trained on the shipped corpus (three Shakespeare
plays, last 10 % held out; held-out loss = mean cross-entropy in nats/byte over 8 fixed batches).
Nothing is written into the log: every spike below is the model's real loss.

Measured with ``python -m lossguard.demo.scenarios NAME`` (or the same :func:`run` from a script),
torch 2.13 CPU, one thread, on the shared 2-core machine while other jobs ran (wall times are upper
bounds; the same run took 31-120 s depending on load). Unguarded runs; seed = model seed,
``data_seed`` 1234 throughout.

=============================  ====  ==========  ========  ===========================================
scenario                       seed  final held  vs clean  what happened
=============================  ====  ==========  ========  ===========================================
clean                          0     2.4830      --        smooth; max attention logit 16.5
clean                          1     2.4663      --        one early blip (step 44, loss 6.3)
clean                          2     2.7201      --        slow start: ~3.4 until step 100 (seed 0: 3.1)
bad_pocket (random bytes)      0     2.5732      +3.6 %    loss 9.15 at step 200, 6-7 inside the pocket;
                                                           held-out 2.621 at step 300 vs 2.521 clean
bad_pocket                     1     2.5581      +3.7 %    loss 8.30 at step 200
bad_pocket_repeat              0     2.5658      +3.3 %    loss 9.16 at step 200, ~5.3 inside
high_lr (lr x30 at step 200)   0     2.7676      +11.5 %   loss 2.6 -> 4.78 (step 202), still ~3.4 at
                                                           208; attention logits 16 -> 453
high_lr                        1     2.8335      +14.9 %   loss -> 4.93 (202); logits -> 724
high_lr                        2     2.9145      +7.1 %    loss -> 6.61 (202); logits -> 897
high_lr_qk_layernorm           0     2.7128      +9.3 %    logits stay <= 11.6 but the loss still
                                                           spikes (5.33 at 203): QK-LN does NOT
                                                           prevent this spike
high_lr_qk_layernorm           1     2.6907      +9.1 %    logits <= 10.4; loss -> 5.99 (203)
high_lr_qk_prescale            0     2.7676      +11.5 %   identical to high_lr: in fp32 pre-scaling
                                                           is the same math (it matters in fp16)
high_lr_eps_free               0     2.7702      +11.6 %   no effect (spike to 4.97)
clean_500 (500 steps)          0     2.3771      --        reference of the two rows below
high_lr_constant (lr 3e-2)     0     2.5547      +7.5 %    no spike, no NaN: logits grow to 235 and
                                                           the model is simply worse
high_lr_constant_qk_layernorm  0     2.3942      +0.7 %    logits <= 9.5: QK-LN removes the penalty
=============================  ====  ==========  ========  ===========================================

What did not work (also measured, seed 0 unless said): a constant lr of 1e-2, 3e-2 or 1e-1
(logits up to 4312 at 1e-1) never made the 2-layer model spike or diverge, it only ended worse
(2.586 / 2.555 / 2.713 vs 2.377 at 500 steps); wider models (width 128) at lr >= 1e-2 spike once
at step ~20 (loss ~10.5, leaving the unigram plateau) and QK-LN does not remove that early spike;
beta2 = 0.999 with a 10x LR jump spikes and ends +9.7 % (seed 0) / +6.2 % (seed 2), but seed 1's
clean beta2 = 0.999 run sits on a plateau (2.897) and the jump *helps* it, too seed-dependent to
use; there eps-free AdamW looked like a cure on seed 0 (2.490) and was not on seed 1 (2.727 vs
2.594): chaos after the spike, not the epsilon. A 10x jump at beta2 = 0.95 recovers within ~40
steps and ends *better* than clean (2.423): a guard that rolls back before step 200 and cuts the
LR of ``high_lr`` by 3x or more should land at or below the clean loss.

Everything is a function of the scenario: the model is built after ``torch.manual_seed(seed)``, and
the batch of step ``s`` is drawn from a generator seeded with ``(data_seed, s)`` only, so a run that
skips or repeats steps (a guard's rollback) sees exactly the batch any other run sees at that step.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Callable

from lossguard.errors import raise_all

#: Kinds of garbage a bad-data pocket can hold.
POCKET_KINDS = ("random_bytes", "repeat", "foreign")
#: Optimizers :func:`run` can build.
OPTIMIZERS = ("adamw", "adamw_eps_free", "adam_atan2")


@dataclass(frozen=True, kw_only=True)
class Pocket:
    """A stretch of garbage batches at a known step."""

    start: int
    """First step (0-based) whose batch is garbage."""
    length: int
    """Number of consecutive garbage batches."""
    kind: str = "random_bytes"
    """``random_bytes`` (uniform bytes), ``repeat`` (one byte repeated), ``foreign`` (Cyrillic /
    Greek letters as UTF-8 bytes: text from another alphabet)."""

    def __post_init__(self) -> None:
        problems = []
        if self.start < 0:
            problems.append(f"field 'start' must be >= 0, got {self.start}")
        if self.length <= 0:
            problems.append(f"field 'length' must be > 0, got {self.length}")
        if self.kind not in POCKET_KINDS:
            problems.append(f"field 'kind' must be one of {', '.join(POCKET_KINDS)}, "
                            f"got {self.kind!r}")
        raise_all(problems, fix="correct the Pocket fields listed above")

    def covers(self, step: int) -> bool:
        """Whether the batch of ``step`` is garbage."""
        return self.start <= step < self.start + self.length


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One reproducible training run of the tiny GPT on the shipped corpus."""

    name: str
    """Short identifier."""
    description: str = ""
    """What the scenario shows."""
    model: dict = field(default_factory=dict)
    """Keyword arguments of :class:`lossguard.demo.model.GPTConfig`."""
    steps: int = 600
    """Optimizer steps."""
    batch_size: int = 16
    """Sequences per batch."""
    seq_len: int = 64
    """Tokens per sequence (<= the model's block_size)."""
    lr: float = 3e-3
    """Peak learning rate."""
    warmup: int = 50
    """Linear warm-up steps."""
    min_lr_frac: float = 0.1
    """Cosine decay ends at ``lr * min_lr_frac`` at the last step."""
    lr_jumps: tuple = ()
    """``((step, factor), ...)``: from ``step`` on the scheduled LR is multiplied by ``factor``
    (a run resumed with the wrong LR, a schedule bug); empty for a plain schedule."""
    optimizer: str = "adamw"
    """One of :data:`OPTIMIZERS`."""
    weight_decay: float = 0.1
    """Decoupled weight decay."""
    betas: tuple = (0.9, 0.95)
    """Adam betas."""
    eps: float = 1e-8
    """Adam epsilon (ignored by the eps-free optimizers)."""
    grad_clip: float = 0.0
    """Clip the global grad norm to this value; 0 = no clipping."""
    pocket: Pocket | None = None
    """Bad-data pocket, or ``None`` for clean data."""
    seed: int = 0
    """Seed of the model init."""
    data_seed: int = 1234
    """Seed of the batch order."""
    eval_batches: int = 8
    """Held-out batches (fixed) for the final loss."""
    eval_every: int = 100
    """Held-out evaluation interval in steps."""

    def __post_init__(self) -> None:
        problems = []
        for f in ("steps", "batch_size", "seq_len", "eval_batches", "eval_every"):
            if getattr(self, f) <= 0:
                problems.append(f"field '{f}' must be > 0, got {getattr(self, f)}")
        if not self.lr > 0:
            problems.append(f"field 'lr' must be > 0, got {self.lr}")
        if self.warmup < 0:
            problems.append(f"field 'warmup' must be >= 0, got {self.warmup}")
        if self.optimizer not in OPTIMIZERS:
            problems.append(f"field 'optimizer' must be one of {', '.join(OPTIMIZERS)}, "
                            f"got {self.optimizer!r}")
        raise_all(problems, fix=f"correct the Scenario fields of {self.name!r} listed above")

    def lr_at(self, step: int) -> float:
        """Learning rate of ``step``: linear warm-up, cosine to ``lr * min_lr_frac``, times jumps."""
        factor = 1.0
        for at, f in self.lr_jumps:
            if step >= at:
                factor *= f
        if step < self.warmup:
            return factor * self.lr * (step + 1) / self.warmup
        t = (step - self.warmup) / max(1, self.steps - self.warmup)
        return factor * self.lr * (self.min_lr_frac
                                   + (1 - self.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))

    def with_(self, **changes) -> "Scenario":
        """A copy with ``changes``; ``model=`` is merged into the model dict."""
        if "model" in changes:
            changes["model"] = {**self.model, **changes["model"]}
        return replace(self, **changes)


def load_corpus() -> bytes:
    """The shipped public-domain corpus as bytes, without its ``#`` header."""
    raw = resources.files("lossguard.demo").joinpath("corpus.txt").read_bytes()
    lines = raw.split(b"\n")
    i = 0
    while i < len(lines) and lines[i].startswith(b"#"):
        i += 1
    return b"\n".join(lines[i:]).lstrip(b"\n")


class CorpusBatches:
    """Deterministic batches from the corpus: the batch of a step depends only on (seed, step).

    Args:
        data: the corpus bytes; the last ``val_frac`` is held out.
        batch_size: sequences per batch.
        seq_len: tokens per sequence.
        seed: batch-order seed.
        pocket: optional garbage pocket.
        val_frac: held-out fraction at the end of the corpus.
    """

    def __init__(self, data: bytes, *, batch_size: int, seq_len: int, seed: int,
                 pocket: Pocket | None = None, val_frac: float = 0.1) -> None:
        import torch

        tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
        n_val = int(len(tokens) * val_frac)
        self.train, self.val = tokens[:-n_val], tokens[-n_val:]
        self.batch_size, self.seq_len, self.seed, self.pocket = batch_size, seq_len, seed, pocket

    def _gen(self, step: int, salt: int = 0):
        import torch

        return torch.Generator().manual_seed((self.seed * 1_000_003 + step) * 7 + salt)

    def batch(self, step: int):
        """``(x, y)`` of shape ``(batch_size, seq_len)`` for ``step`` (garbage inside the pocket)."""
        import torch

        g = self._gen(step)
        if self.pocket is not None and self.pocket.covers(step):
            seq = _garbage(self.pocket.kind, self.batch_size, self.seq_len + 1, g)
        else:
            ix = torch.randint(len(self.train) - self.seq_len - 1, (self.batch_size,), generator=g)
            seq = torch.stack([self.train[i:i + self.seq_len + 1] for i in ix.tolist()])
        return seq[:, :-1], seq[:, 1:]

    def val_batches(self, n: int):
        """``n`` fixed held-out batches (the same for every run of every scenario)."""
        import torch

        g = torch.Generator().manual_seed(987_654_321)
        out = []
        for _ in range(n):
            ix = torch.randint(len(self.val) - self.seq_len - 1, (self.batch_size,), generator=g)
            seq = torch.stack([self.val[i:i + self.seq_len + 1] for i in ix.tolist()])
            out.append((seq[:, :-1], seq[:, 1:]))
        return out


def _garbage(kind: str, b: int, t: int, g):
    import torch

    if kind == "random_bytes":
        return torch.randint(0, 256, (b, t), generator=g)
    if kind == "repeat":
        tok = torch.randint(0, 256, (b, 1), generator=g)
        return tok.expand(b, t).clone()
    # "foreign": random lowercase Cyrillic (U+0430..U+044F) and Greek (U+03B1..U+03C9) letters and
    # spaces, UTF-8 encoded: 2-byte sequences the English corpus never contains.
    letters = [chr(c) for c in range(0x430, 0x450)] + [chr(c) for c in range(0x3B1, 0x3CA)] + [" "] * 8
    rows = []
    for _ in range(b):
        idx = torch.randint(0, len(letters), (t,), generator=g).tolist()
        enc = "".join(letters[i] for i in idx).encode("utf-8")[:t]
        rows.append(torch.tensor(list(enc), dtype=torch.long))
    return torch.stack(rows)


@dataclass
class RunResult:
    """What one run of a scenario measured."""

    scenario: str
    losses: list
    """Training loss per step (NaN/inf kept as they were)."""
    grad_norms: list
    """Global gradient norm per step, before clipping."""
    attn_logit_max: list
    """Largest attention logit ``q.k/sqrt(d)`` over layers per step."""
    val: dict
    """``{step: held-out loss}`` every ``eval_every`` steps and at the end."""
    final_val: float
    """Held-out loss after the last step (inf if the run diverged to non-finite)."""
    diverged: bool
    """Whether a training loss became non-finite (the run then stops)."""
    wall_time: float
    """Seconds for the whole run, evaluation included."""


def build_optimizer(sc: Scenario, model):
    """The scenario's optimizer over ``model``'s parameters (no weight decay on norms/biases)."""
    import torch

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": sc.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    if sc.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=sc.lr, betas=sc.betas, eps=sc.eps, foreach=False)
    if sc.optimizer == "adamw_eps_free":
        from lossguard.techniques.adam_eps_free import AdamWEpsFree
        return AdamWEpsFree(groups, lr=sc.lr, betas=sc.betas)
    from lossguard.techniques.adam_eps_free import AdamAtan2
    return AdamAtan2(groups, lr=sc.lr, betas=sc.betas)


def held_out_loss(model, val_set) -> float:
    """Mean loss over the fixed held-out batches, in eval mode (dropout off), without gradients."""
    import torch

    model.eval()
    with torch.no_grad():
        v = sum(model(x, y)[1].item() for x, y in val_set) / len(val_set)
    model.train()
    return v


def run(sc: Scenario, *, on_step: Callable | None = None) -> RunResult:
    """Train the tiny GPT as ``sc`` says, unguarded; stops early if the loss becomes non-finite.

    Args:
        sc: the scenario.
        on_step: optional ``fn(step, loss, grad_norm)`` called after each step (progress bars).
    """
    import torch

    from lossguard.demo.model import GPTConfig, TinyGPT, attention_logit_max

    t0 = time.perf_counter()
    torch.manual_seed(sc.seed)
    model = TinyGPT(GPTConfig(**{"block_size": sc.seq_len, **sc.model}))
    opt = build_optimizer(sc, model)
    data = CorpusBatches(load_corpus(), batch_size=sc.batch_size, seq_len=sc.seq_len,
                         seed=sc.data_seed, pocket=sc.pocket)
    val_set = data.val_batches(sc.eval_batches)

    def evaluate() -> float:
        return held_out_loss(model, val_set)

    losses, gnorms, logits_max, val = [], [], [], {}
    diverged = False
    for step in range(sc.steps):
        for group in opt.param_groups:
            group["lr"] = sc.lr_at(step)
        x, y = data.batch(step)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        clip = sc.grad_clip if sc.grad_clip > 0 else float("inf")
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item()
        lv = loss.item()
        losses.append(lv)
        gnorms.append(gn)
        logits_max.append(max(attention_logit_max(model)))
        if on_step is not None:
            on_step(step, lv, gn)
        if not math.isfinite(lv):
            diverged = True
            break
        opt.step()
        if (step + 1) % sc.eval_every == 0:
            val[step + 1] = evaluate()
    final = float("inf") if diverged else evaluate()
    if not diverged:
        val[sc.steps] = final
    return RunResult(scenario=sc.name, losses=losses, grad_norms=gnorms,
                     attn_logit_max=logits_max, val=val, final_val=final, diverged=diverged,
                     wall_time=time.perf_counter() - t0)


#: The tiny demo model: 2 layers, width 64, 4 heads, byte vocabulary (119,104 parameters).
DEMO_MODEL = dict(n_layer=2, n_embd=64, n_head=4)

_CLEAN = Scenario(name="clean", description="clean data, AdamW lr 3e-3 (beta2 0.95): the reference",
                  model=DEMO_MODEL, steps=400, batch_size=16, seq_len=64, lr=3e-3, warmup=50)
#: 30x the scheduled LR from step 200 on (3e-3 peak; ~1.95e-3 scheduled at step 200 -> ~5.9e-2).
_JUMP = ((200, 30.0),)

#: Named scenarios; measured outcomes in the module docstring.
SCENARIOS: dict[str, Scenario] = {
    "clean": _CLEAN,
    "bad_pocket": _CLEAN.with_(
        name="bad_pocket", description="30 batches of uniformly random bytes at steps 200-229",
        pocket=Pocket(start=200, length=30, kind="random_bytes")),
    "bad_pocket_repeat": _CLEAN.with_(
        name="bad_pocket_repeat", description="30 batches of one byte repeated at steps 200-229",
        pocket=Pocket(start=200, length=30, kind="repeat")),
    "high_lr": _CLEAN.with_(
        name="high_lr", lr_jumps=_JUMP,
        description="LR raised 30x at step 200 (to ~5.9e-2): attention logits grow, loss spikes"),
    "high_lr_qk_layernorm": _CLEAN.with_(
        name="high_lr_qk_layernorm", lr_jumps=_JUMP, model=dict(qk_layernorm=True),
        description="high_lr with QK-LayerNorm"),
    "high_lr_qk_prescale": _CLEAN.with_(
        name="high_lr_qk_prescale", lr_jumps=_JUMP, model=dict(qk_prescale=True),
        description="high_lr with Q/K pre-scaled before the matmul"),
    "high_lr_eps_free": _CLEAN.with_(
        name="high_lr_eps_free", lr_jumps=_JUMP, optimizer="adamw_eps_free",
        description="high_lr with eps-free AdamW"),
    "high_lr_constant": _CLEAN.with_(
        name="high_lr_constant", steps=500, lr=3e-2,
        description="lr 3e-2 from the start (500 steps): logits grow, no spike, a worse model"),
    "high_lr_constant_qk_layernorm": _CLEAN.with_(
        name="high_lr_constant_qk_layernorm", steps=500, lr=3e-2, model=dict(qk_layernorm=True),
        description="high_lr_constant with QK-LayerNorm"),
    "clean_500": _CLEAN.with_(name="clean_500", steps=500,
                              description="clean, 500 steps: reference of high_lr_constant"),
}


def spike_steps(losses: list, *, window: int = 20, ratio: float = 1.25, skip: int = 30) -> list:
    """Steps whose loss exceeds ``ratio`` times the median of the previous ``window`` steps.

    A crude stand-in used only to describe the scenarios (the library's detectors live in
    :mod:`lossguard.detect`); non-finite losses count as spikes. The first ``skip`` steps are
    ignored (the initial fall of the loss).
    """
    import statistics

    out = []
    for i in range(max(skip, window), len(losses)):
        med = statistics.median(losses[i - window:i])
        if not math.isfinite(losses[i]) or losses[i] > ratio * med:
            out.append(i)
    return out


def main(argv=None) -> int:
    """``python -m lossguard.demo.scenarios [NAME ...] [--seeds N]``: run and print a table."""
    import argparse

    import torch

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("names", nargs="*", help=f"scenarios (default: all of {list(SCENARIOS)})")
    parser.add_argument("--seeds", type=int, default=1, help="model seeds 0..N-1 per scenario")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"{'scenario':24s} {'seed':>4s} {'final held-out':>14s} {'diverged':>8s} "
          f"{'max loss@step':>14s} {'spikes':>6s} {'max attn logit':>14s} {'wall s':>7s}")
    for name in args.names or list(SCENARIOS):
        for seed in range(args.seeds):
            sc = SCENARIOS[name].with_(seed=seed)
            r = run(sc)
            finite = [(v, i) for i, v in enumerate(r.losses) if math.isfinite(v)]
            top, at = max(finite[30:] or finite)
            print(f"{name:24s} {seed:4d} {r.final_val:14.4f} {str(r.diverged):>8s} "
                  f"{top:8.2f}@{at:<5d} {len(spike_steps(r.losses)):6d} "
                  f"{max(r.attn_logit_max):14.1f} {r.wall_time:7.1f}", flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
