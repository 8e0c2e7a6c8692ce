"""The analyser names a stall (issue 20): a long plateau far above the early trend, at the peak LR,
resuming as the LR decays -- and not a converged run, a decelerating healthy curve or a real log."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lossguard import metrics as M
from lossguard.analysis import analyze
from lossguard.classify.incident import IncidentKind as K
from lossguard.detect.robust import is_smoothed
from lossguard.detect.stall import StallConfig, find_stalls
from lossguard.io import read_log
from lossguard.recovery.action import Action

REAL = Path(__file__).parent / "data" / "real-logs"


def cosine_lr(n: int, peak: float, warm: int) -> np.ndarray:
    t = np.arange(n)
    lr = peak * np.minimum(1.0, (t + 1) / warm)
    after = t >= warm
    lr[after] = peak * (0.1 + 0.45 * (1 + np.cos(np.pi * (t[after] - warm) / (n - warm))))
    return lr


def healthy(n: int, seed: int, floor: float = 2.0, noise: float = 0.04) -> np.ndarray:
    """A power-law curve with an LR-decay bonus at the end (cosine), plus noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(1, n + 1)
    return floor + 3.5 * t ** -0.45 - 0.15 * (t / n) ** 2 + rng.normal(0, noise, n)


def stalled(n: int, seed: int, start: int, stop: int | None, noise: float = 0.04) -> np.ndarray:
    """Healthy until ``start``, then flat until ``stop`` (None: to the end), then the healthy curve's
    shape again from the plateau level (the LR decays and learning resumes)."""
    x = healthy(n, seed, noise=0.0)
    rng = np.random.default_rng(seed + 100)
    y = x.copy()
    y[start:] = x[start]
    if stop is not None:
        y[stop:] = x[start] - (x[start] - x[-1] + 0.1) * np.linspace(0, 1, n - stop) ** 0.7
    return y + rng.normal(0, noise, n)


def _write(path: Path, loss: np.ndarray, lr: np.ndarray | None = None, attn: np.ndarray | None = None,
           every: int = 1) -> Path:
    with open(path, "w") as fh:
        for s in range(0, len(loss), every):
            rec = {"step": s, "loss": float(loss[s])}
            if lr is not None:
                rec["lr"] = float(lr[s])
            if attn is not None:
                rec[M.ATTN_LOGIT_MAX] = float(attn[s])
            fh.write(json.dumps(rec) + "\n")
    return path


@pytest.mark.parametrize("seed", range(4))
def test_stall_at_peak_lr_resuming_is_named_with_evidence_and_plan(tmp_path, seed):
    n = 1200
    loss = stalled(n, seed, start=100, stop=650)
    attn = np.concatenate([np.linspace(5, 900, 200), np.full(n - 200, 900.0)])
    rep = analyze(read_log(_write(tmp_path / "run.jsonl", loss, cosine_lr(n, 0.1, 60), attn)))
    stalls = [(i, p) for i, p in zip(rep.incidents, rep.plans, strict=False) if i.kind is K.STALL]
    assert len(stalls) == 1
    inc, plan = stalls[0]
    assert 60 <= inc.onset <= 200 and 450 <= inc.peak <= 700
    assert set(inc.details["tests"]) == {"resumed", "lr_at_peak", "attn_logits"}
    assert "peak" in inc.evidence and "attention logit" in inc.evidence and "resumed" in inc.evidence
    # the guard's policy does not act on a plateau (no spike, no rise): the plan is advice in words
    assert plan.action is Action.WATCH
    text = " ".join(plan.reasons)
    assert "peak LR" in text and "QK-LayerNorm" in text and "warm-up" in text


@pytest.mark.parametrize("seed", range(3))
def test_stall_never_resumed_needs_the_attention_logits(tmp_path, seed):
    n = 1000
    loss = stalled(n, seed, start=120, stop=None)
    lr = cosine_lr(n, 0.3, 50)
    attn = np.geomspace(3, 5e3, n)
    rep = analyze(read_log(_write(tmp_path / "run.jsonl", loss, lr, attn, every=5)))
    stalls = [i for i in rep.incidents if i.kind is K.STALL]
    assert len(stalls) == 1 and {"lr_at_peak", "attn_logits"} <= set(stalls[0].details["tests"])
    assert stalls[0].end is None and "not resumed" in stalls[0].evidence
    # from the loss and the LR alone a plateau that never ends is not told from convergence
    for path in (_write(tmp_path / "lr.jsonl", loss, lr, every=5), _write(tmp_path / "bare.jsonl", loss, every=5)):
        assert not [i for i in analyze(read_log(path)).incidents if i.kind is K.STALL]


@pytest.mark.parametrize("seed", range(6))
def test_healthy_and_converged_runs_are_not_stalls(tmp_path, seed):
    n = 1500
    lr = cosine_lr(n, 3e-3, 100)
    for loss in (healthy(n, seed), healthy(n, seed, noise=0.15)):
        assert find_stalls(np.arange(n), loss, lr=(np.arange(n), lr)) == []
    # converged early at a constant LR (flat for most of the run, never resuming): not a stall
    t = np.arange(1, n + 1)
    conv = 2.0 + 3.0 * np.exp(-t / 80) + np.random.default_rng(seed).normal(0, 0.03, n)
    assert find_stalls(t, conv, lr=(t, np.full(n, 1e-3))) == []
    # ... and with a cosine LR, converging during the peak: the LR alone does not make it a stall
    assert find_stalls(t, conv, lr=(t, lr)) == []


def test_short_logs_are_not_judged():
    assert find_stalls(np.arange(50), np.ones(50), cfg=StallConfig()) == []


@pytest.mark.parametrize("name", sorted(p.name for p in REAL.glob("*.csv")))
def test_real_logs_raise_no_stall(name):
    rep = analyze(read_log(REAL / name))
    assert not [i for i in rep.incidents if i.kind is K.STALL]


def test_a_spike_inside_the_plateau_does_not_end_it(tmp_path):
    n = 1200
    loss = stalled(n, 7, start=100, stop=650)
    loss[300:330] += 1.5  # a burst of hard batches in the middle of the plateau
    stalls = find_stalls(np.arange(n), loss, lr=(np.arange(n), cosine_lr(n, 0.1, 60)))
    assert len(stalls) == 1 and stalls[0].onset <= 200 and stalls[0].end >= 500
    assert "resumed" in stalls[0].reasons


NATURAL = Path(__file__).parent / "data" / "natural"


def spike_then_plateau(n: int, seed: int, noise: float = 0.06) -> np.ndarray:
    """The shape of benchmarks/natural_instability.py at LR 1.0: the best level by 7% of the run, a
    warm-up spike far above it, back to that level and flat at the peak LR, resuming at the decay."""
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=float)
    y = 3.42 + 2.1 * np.exp(-t / (0.01 * n))
    hit = t >= 0.075 * n  # the spike: up by 1.1 at once, decaying over 3% of the run ...
    y[hit] += 1.1 * np.exp(-(t[hit] - 0.075 * n) / (0.03 * n)) + 0.05  # ... back to just above the best
    y[(t >= 0.325 * n) & (t < 0.375 * n)] += 0.3  # a burst of hard batches inside the plateau
    after = t >= 0.58 * n
    y[after] -= 0.55 * ((t[after] - 0.58 * n) / (0.42 * n)) ** 0.8  # learning resumes as the LR decays
    return y + rng.normal(0, noise, n)


@pytest.mark.parametrize("seed", range(4))
def test_a_warm_up_spike_before_the_plateau_does_not_hide_it(tmp_path, seed):
    # issue 20, LR 1.0: the stretch right before the plateau is the spike, not progress; the early
    # trend is read up to the best level reached before it
    n = 600
    loss = spike_then_plateau(n, seed)
    lr = cosine_lr(n, 1.0, 60)
    stalls = find_stalls(np.arange(n), loss, lr=(np.arange(n), lr))
    assert len(stalls) == 1
    st = stalls[0]
    assert 60 <= st.onset <= 200 and 250 <= st.end <= 400
    assert {"resumed", "lr_at_peak"} <= set(st.reasons)
    assert st.level - st.expected >= 3 * st.tol


@pytest.mark.parametrize("seed", range(4))
def test_a_jump_up_that_stays_is_not_a_stall_of_the_earlier_level(seed):
    # the best level before a plateau anchors the trend only when the plateau comes back to it:
    # a loss that jumps up and stays there (a level shift) is another test's finding
    n = 1200
    t = np.arange(1, n + 1)
    loss = healthy(n, seed)
    loss[400:] += 0.8
    assert find_stalls(t, loss, lr=(t, np.full(n, 1e-3))) == []
    # ... even when it sits flat up there and falls again at the LR decay
    jumped = stalled(n, seed, start=400, stop=750) + 0.8 * (t > 400)
    assert find_stalls(t, jumped, lr=(t, cosine_lr(n, 0.1, 60))) == []


def test_the_real_lr_1_run_is_named_a_stall():
    # benchmarks/natural_instability.py --lrs 1.0 --configs clip --seeds 0 --steps 600 (README there)
    rep = analyze(read_log(NATURAL / "clip_lr1_s0.jsonl"))
    stalls = [i for i in rep.incidents if i.kind is K.STALL]
    assert len(stalls) == 1
    inc = stalls[0]
    assert 100 <= inc.onset <= 200 and 250 <= inc.peak <= 360
    assert inc.end is not None and inc.end <= 450  # resumed as the LR decayed
    assert set(inc.details["tests"]) == {"resumed", "lr_at_peak", "attn_logits"}
    assert inc.baseline < 3.42 - 0.1 < inc.peak_value  # far above where its progress was heading


@pytest.mark.parametrize("seed", range(3))
def test_a_plateau_that_resumes_after_an_lr_restart_is_the_schedule_not_a_stall(seed):
    """The same plateau-then-resume loss: named when the LR decays into the resumption (a stall),
    not when the LR jumps back up before it (a warm restart: SGDR's troughs look like plateaus)."""
    n = 1200
    loss = stalled(n, seed, start=100, stop=650)
    steps = np.arange(n, dtype=np.float64)
    decaying = cosine_lr(n, 0.1, 60)
    assert len(find_stalls(steps, loss, lr=(steps, decaying))) == 1
    restart = decaying.copy()
    restart[100:650] = 0.005  # the trough of a cycle ...
    restart[650:] = 0.1       # ... and the restart to the peak where the loss resumes
    assert find_stalls(steps, loss, lr=(steps, restart)) == []
    # attention-logit growth is still named, whatever the schedule did
    attn = (steps, np.full(n, 900.0))
    assert len(find_stalls(steps, loss, lr=(steps, restart), attn=attn)) == 1


def moving_mean(raw: np.ndarray, window: int) -> np.ndarray:
    """The mean of the last ``window`` raw losses (fewer while it fills), as a trainer's bar shows it."""
    c = np.cumsum(raw)
    out = c.copy()
    out[window:] = c[window:] - c[:-window]
    return out / np.minimum(np.arange(1, len(raw) + 1), window)


@pytest.mark.parametrize("seed", range(6))
def test_a_moving_mean_of_a_flat_noisy_loss_wanders_but_never_stalls(seed):
    # kohya-style avr_loss: the mean of the last epoch's per-step losses of a diffusion model (noisy,
    # no trend): it wanders slowly over hundreds of steps and its point-to-point noise is tiny
    raw = np.random.default_rng(seed).gamma(2.0, 0.05, 1600)
    x = moving_mean(raw, 200)
    assert is_smoothed(x) and not is_smoothed(raw)
    assert find_stalls(np.arange(1, 1601), x) == []


@pytest.mark.parametrize("seed", range(2))
def test_a_moving_mean_of_a_stalled_loss_is_still_a_stall(seed):
    n = 1200
    x = moving_mean(stalled(n, seed, start=100, stop=650), 20)
    assert is_smoothed(x)
    assert len(find_stalls(np.arange(n), x, lr=(np.arange(n), cosine_lr(n, 0.1, 60)))) == 1


def test_a_creeping_plateau_of_a_real_run_is_named_with_its_attention_logits():
    # issue 20, harsh preset, + guard at LR 0.1, seed 1 (tests/data/natural/README.md): the loss creeps
    # 3.34 -> 3.13 over steps 45-599 at the peak LR (the best LR ends at ~2.0). It improves by more
    # than the level tolerance, so the level reading alone cut it into pieces shorter than 20% of the run.
    path = NATURAL / "harsh_guard_lr0.1_s1.jsonl"
    stalls = [i for i in analyze(read_log(path)).incidents if i.kind is K.STALL]
    assert len(stalls) == 1
    inc = stalls[0]
    assert inc.onset <= 100 and inc.peak >= 550 and inc.end is None
    assert {"lr_at_peak", "attn_logits"} <= set(inc.details["tests"])
    assert inc.details["decline"] > inc.details["tolerance"]  # it crept: not a level plateau
    assert "nearly stopped improving" in inc.evidence and "attention logit" in inc.evidence
    # the creep reading needs the cause measured: from the loss and the LR alone it is not told from
    # a healthy curve that decelerates (no stall named without the attention logits)
    log = read_log(path)
    steps, loss = log.live(M.LOSS)
    assert find_stalls(steps, loss, lr=log.live(M.LR)) == []


def cooldown(n: int, seed: int, noise: float = 0.04) -> tuple[np.ndarray, np.ndarray]:
    """A healthy run with a constant LR and a linear cooldown to 0 over its last 30% (modded-nanogpt's
    schedule): a power law in the summed LR, and a faster fall during the cooldown (the annealing
    bonus: the false "resumption" after a slow stretch)."""
    t = np.arange(n)
    lr = np.minimum(1.0, (t + 1) / (n // 15))
    c0 = int(0.7 * n)
    lr[c0:] = np.linspace(1.0, 0.0, n - c0)
    bonus = 0.25 * np.clip((t - c0) / (n - c0), 0.0, 1.0) ** 1.5
    loss = 2.0 + 3.5 * (1.0 + np.cumsum(lr)) ** -0.45 - bonus
    return loss + np.random.default_rng(seed).normal(0, noise, n), lr * 1e-3


@pytest.mark.parametrize("seed", range(4))
def test_healthy_cosine_and_cooldown_runs_with_logits_logged_are_not_stalls(seed):
    n = 1500
    t = np.arange(n, dtype=np.float64)
    below = (t, np.linspace(1.0, 60.0, n))  # the stable LRs' range (issue 20: 28-59)
    late = (t, np.where(t >= 0.4 * n, 1000.0, 10.0))  # past the bar, but not early in the run
    cool, lr = cooldown(n, seed)
    cos, cos_lr = healthy(n, seed), cosine_lr(n, 3e-3, 100)
    for attn in (None, below, late):
        assert find_stalls(t, cool, lr=(t, lr), attn=attn) == []
        assert find_stalls(t, cos, lr=(t, cos_lr), attn=attn) == []


@pytest.mark.parametrize("name", ["mng_adamw_baseline_124m.csv", "megatron_gpt3_15b_dev_h100.csv"])
def test_real_curves_with_logits_that_pass_the_bar_late_are_not_stalls(name):
    # the creep reading is tied to the precursor: the logits above 100 early in the run
    log = read_log(REAL / name)
    steps, loss = log.live(M.LOSS)
    attn = (steps, np.where(steps >= steps[0] + 0.3 * (steps[-1] - steps[0]), 1000.0, 10.0))
    assert find_stalls(steps, loss, attn=attn) == []
