"""torchtitan console: ``[titan] <asctime> - root - INFO - `` then colour-coded metric pairs.

Format taken from github.com/pytorch/torchtitan @ b5bcd76c66d0acb1a08b176d9639425bc55e0b2a:
- torchtitan/tools/logging.py: formatter ``"[titan] %(asctime)s - %(name)s - %(levelname)s - %(message)s"``;
- torchtitan/components/metrics.py ``MetricsProcessor.log``: ``{red}step: {step:2}  {green}loss:
  {loss:8.5f}  {orange}grad_norm: {gn:7.4f}  {turquoise}memory: {GiB:5.2f}GiB({pct:.2f}%)  {blue}tps:
  {tps:,}  {cyan}tflops: {tf:,.2f}  {magenta}mfu: {mfu:.2f}%{reset}`` and ``log_validation``
  (``{yellow}validate step: ...  {green}loss: {loss:7.4f} ...``);
- torchtitan/tools/utils.py ``Color``: red ``\\033[31m``, orange ``\\033[38;2;180;60;0m``, reset ``\\033[39m``...
- torchtitan/trainer.py start-up lines (``Building llama3 8B``, ``Training starts at step 1``).
torchrun prefixes each line with ``[rank0]:``. A NaN loss is printed as ``nan`` (no special handling).
"""

from __future__ import annotations

from datetime import timedelta

from evals.console.curve import Event, EventKind
from evals.console.fixture import Clock, Run, Spec
from evals.console.text import log_ts

RED, GREEN, YELLOW, BLUE, MAGENTA, CYAN, RESET = ("\033[31m", "\033[32m", "\033[33m", "\033[34m",
                                                 "\033[35m", "\033[36m", "\033[39m")
ORANGE, TURQUOISE = "\033[38;2;180;60;0m", "\033[38;2;54;234;195m"
SOURCE = ("github.com/pytorch/torchtitan torchtitan/components/metrics.py + torchtitan/tools/logging.py "
          "(b5bcd76c66d0acb1a08b176d9639425bc55e0b2a)")


def render(run: Run, ranks: int = 1) -> str:
    """Render a torchtitan training log as captured from ``torchrun`` stdout (``--local-ranks-filter`` = ``ranks``).

    With several ranks every rank prints every line (the loss is the global average, the same on all ranks), each
    with its own ``[rankN]:`` prefix and a few milliseconds apart.
    """
    clock = Clock(run.rng)
    out: list[str] = []

    def info(msg: str, dt: float = 0.05) -> None:
        t = clock.tick(dt)
        for r in range(ranks):
            out.append(f"[rank{r}]:[titan] {log_ts(t + timedelta(milliseconds=3 * r))} - root - INFO - {msg}")

    info("Starting job: Llama 3 8B training")
    info("Building 1-D device mesh with ['dp_shard'], [8]")
    info("[GC] Initial GC collection 0.00 seconds")
    info("Loading tokenizer from tokenizer.json")
    info("Preparing c4 dataset from allenai/c4", 2.0)
    info("Building llama3 8B with TransformerModelArgs(_enforced='This field is used to enforce all fields have defaults.', dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, vocab_size=128256, multiple_of=1024, ffn_dim_multiplier=1.3, norm_eps=1e-05, rope_theta=500000, max_seq_len=8192, depth_init=True, use_flex_attn=False, attn_mask_type='causal', eos_id=0)")
    info(f"{BLUE}Model llama3 8B {RED}size: 8,030,261,248 total parameters{RESET}")
    info("Applied selective activation checkpointing to the model")
    info("Applied FSDP to the model")
    info("Peak FLOPS used for computing MFU: 9.890e+14")
    info("CUDA memory usage for model: 3.77GiB(3.97%)")
    info("Mixed precision training is handled by fully_shard")
    info("Trainer is initialized with 8192 tokens per DP rank, 65536 tokens per train step, gradient accumulation steps 1, maximum context length 8192, total steps 6000 (warmup 200)")
    info("Training starts at step 1")
    nan_at = run.nan_from()
    for i in range(run.n):
        step = run.steps[i]
        v = run.loss[i]
        loss = run.show(i, f"{v:8.5f}")
        gn = run.gnorm(i)
        tps = int(6100 + run.rng.gauss(0, 60))
        tf = tps * 6 * 8.03e9 / 1e12
        info(f"{RED}step: {step:2}  {GREEN}loss: {loss}  {ORANGE}grad_norm: {gn:7.4f}  "
             f"{TURQUOISE}memory: 63.19GiB(66.52%)  {BLUE}tps: {tps:,}  {CYAN}tflops: {tf:,.2f}  "
             f"{MAGENTA}mfu: {100 * tf / 989:.2f}%{RESET}", 1.3 * run.spec.interval)
        if step % 500 == 0:
            info(f"{YELLOW}validate step: {step:2}  {GREEN}loss: {v + 0.05:7.4f}  "
                 f"{TURQUOISE}memory: 63.19GiB(66.52%)  {BLUE}tps: 18,204{RESET}", 20)
            info("Saving the checkpoint (or staging if async is enabled).")
            info("[GC] GC collection invoked by checkpointer. 0.02 seconds", 30)
            info("Finished saving the checkpoint (or staging if async is enabled)in 31.27 seconds.")
        if nan_at is not None and i >= nan_at + 5:
            break
    if nan_at is None:
        info("Sleeping 2 seconds for other ranks to complete")
        info("Training completed", 2)
    return "\n".join(out) + "\n"


FIXTURES = [
    Spec("torchtitan__healthy.log", "torchtitan", SOURCE, "step", "loss", render, points=262,
         interval=10, seed=101,
         notes="ANSI colour codes between each label and its number; [rank0]: torchrun prefix; log_freq 10"),
    Spec("torchtitan__four_ranks_healthy.log", "torchtitan", SOURCE, "step", "loss", lambda r: render(r, ranks=4),
         points=150, interval=10, seed=103,
         notes="LOG_RANK=0,1,2,3: every line printed by 4 ranks ([rank0]: .. [rank3]:), same step and loss on each"),
    Spec("torchtitan__spike_nan.log", "torchtitan", SOURCE, "step", "loss", render, points=285,
         interval=1, first=1, seed=102,
         events=(Event(EventKind.SPIKE, 0.35), Event(EventKind.NONFINITE, 0.8)),
         notes="log_freq 1; a spike that recovers, then loss prints as 'nan' for 6 steps before the log ends"),
]
