"""Replay check: re-run a flagged step's forward on the same batch with the same RNG.

If the replayed loss does not reproduce the flagged one, the fault was transient (a hardware or
communication glitch), not bad data: the step is still skipped -- its gradient is suspect -- but it
does not count towards an episode, and the event says so (Megatron makes the same check by
re-running a step and exiting with a code for its launcher; here it happens in process).

Cost: nothing on a good step except capturing the torch RNG state when the batch is drawn (a copy
of a few KB on CPU; ``torch.cuda.get_rng_state`` is also a small device-to-host copy); one extra
forward pass (no backward) on a flagged step only.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch


def capture_torch_rng() -> dict[str, Any]:
    """The torch RNG states a forward pass draws from (CPU, and the current CUDA device if any)."""
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"])


def replay_loss(fn: Callable[[], Any], rng_state: dict[str, Any]) -> float:
    """Run ``fn()`` (the step's forward, returning the loss) under ``rng_state`` without autograd.

    The caller's RNG state is restored afterwards, so the replay changes nothing downstream.
    """
    now = capture_torch_rng()
    try:
        _set(rng_state)
        with torch.no_grad():
            out = fn()
        return float(out.detach().float().mean()) if torch.is_tensor(out) else float(out)
    finally:
        _set(now)


def reproduces(original: float, replayed: float, rtol: float) -> bool:
    """True if ``replayed`` reproduces ``original``: both non-finite, or within ``rtol`` of it."""
    if not math.isfinite(original) or not math.isfinite(replayed):
        return not math.isfinite(original) and not math.isfinite(replayed)
    return abs(replayed - original) <= rtol * max(abs(original), 1e-12)


def replay_check(verdict, meta: dict[str, Any], *, world: int, log, rtol: float, device) -> bool:
    """Replay a flagged step and log the result; returns True if the fault was *transient*.

    Args:
        verdict: the flagged step's :class:`Verdict` (its ``local_loss`` is compared).
        meta: the step's ``replay`` callable and ``rng`` state.
        world: ranks; under DDP every rank takes the same decision (one MIN all-reduce).
        log: the :class:`EventLog` the ``replay`` event goes to.
        rtol: :attr:`GuardConfig.replay_rtol`.
        device: where the all-reduce flag lives.
    """
    from ..recovery.action import Action
    from ..recovery.decision import Decision

    again = replay_loss(meta["replay"], meta["rng"])
    ok = reproduces(verdict.local_loss, again, rtol)
    if world > 1:
        flag = torch.tensor([1.0 if ok else 0.0], dtype=torch.float64, device=device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MIN)
        ok = bool(flag.item())
    log.event(Decision(Action.REPLAY, verdict.step, [
        "fault reproduces on replay (data or model)" if ok else
        "fault did not reproduce on replay: transient (hardware) fault"],
        {"loss": verdict.local_loss, "replayed_loss": again, "reproduced": ok, "transient": not ok}).record())
    return not ok
