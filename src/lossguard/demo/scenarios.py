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

from .scenario import Pocket, Scenario
from .unguarded import run

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
