"""GPU self-check: the guard's device-side claims, checked on the machine you will train on.

Run it in one command on a machine with a CUDA device::

    python -m lossguard.testing.gpu_check            # CUDA; skips cleanly (exit 0) without one
    python -m lossguard.testing.gpu_check --device cpu   # the device-agnostic checks on the CPU

Checks (one line each: PASS, DIFF, SKIP or FAIL, with the numbers):

- ``hot_path_no_sync`` (CUDA only): 30 guarded steps of a small MLP with :class:`SkipStepAdamW`,
  device statistics and the deferred host read, under ``torch.cuda.set_sync_debug_mode("error")``:
  any host synchronisation in ``guard.step`` raises. One step's verdict is read a step late
  through a pinned buffer and an event; a FAIL names the call that synchronised.
- ``skipstep_vs_adamw``: :class:`SkipStepAdamW` with the gate open against ``torch.optim.AdamW``
  (``capturable=True`` on CUDA, the sync-free variant; the single-tensor path on the CPU) over 25
  healthy steps: PASS if bitwise equal, DIFF (with the largest difference) if only close.
- ``skipstep_gate_closed``: a closed gate with NaN gradients leaves weights, both moments and
  Adam's ``t`` bitwise unchanged.
- ``snapshot_roundtrip``: :class:`HostSnapshot` take (pinned buffers and a side stream on CUDA),
  three more steps, restore: weights and optimizer state bitwise equal to the snapshot's.
- ``nccl_two_ranks`` (2+ CUDA devices): :func:`reduce_step_stats` over NCCL on 2 ranks gives both
  the same global loss, grad norm and non-finite flag.

Exit code: 1 if any check FAILs, else 0. ``tests/test_gpu_check.py`` runs it in the suite.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class Result:
    """One check's outcome."""

    name: str
    status: str
    """``"PASS"``, ``"DIFF"`` (close, not bitwise), ``"SKIP"`` or ``"FAIL"``."""
    detail: str = ""


def _mlp(device, seed: int = 0):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 4)).to(device)


def _batch(step: int, device):
    import torch

    g = torch.Generator().manual_seed(step)
    return torch.randn(16, 32, generator=g).to(device), torch.randn(16, 4, generator=g).to(device)


def check_hot_path(device) -> Result:
    """Guarded steps under sync debug mode "error" (CUDA only)."""
    import torch

    from ..guard import GuardConfig, SkipStepAdamW, StabilityGuard

    if device.type != "cuda":
        return Result("hot_path_no_sync", "SKIP", "needs CUDA")
    model = _mlp(device)
    guard = StabilityGuard(model, SkipStepAdamW(model.parameters(), lr=1e-3),
                           config=GuardConfig(checkpoint_every=None, stats="device", gate="device",
                                              defer_host_read=True, log_metrics=False, replay=False))
    batches = [_batch(s, device) for s in range(30)]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for x, y in batches:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            guard.step(loss)
    except RuntimeError as exc:
        return Result("hot_path_no_sync", "FAIL", f"host sync in guard.step: {str(exc).splitlines()[0]}")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    guard.flush()
    return Result("hot_path_no_sync", "PASS", f"30 steps, {guard.ledger.skips} withheld, no host sync")


def check_skipstep_vs_adamw(device) -> Result:
    """SkipStepAdamW (gate open) against torch's AdamW over healthy steps."""
    import torch

    from ..guard import SkipStepAdamW

    m1, m2 = _mlp(device), _mlp(device)
    o1 = SkipStepAdamW(m1.parameters(), lr=3e-3, weight_decay=0.1)
    kw: dict[str, Any] = {"capturable": True, "foreach": False} if device.type == "cuda" else {"foreach": False}
    o2 = torch.optim.AdamW(m2.parameters(), lr=3e-3, weight_decay=0.1, **kw)
    gate = torch.tensor(True, device=device)
    for s in range(25):
        x, y = _batch(s, device)
        for m, o in ((m1, o1), (m2, o2)):
            o.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(m(x), y).backward()
            o.step(gate=gate) if o is o1 else o.step()
    pairs = list(zip(m1.parameters(), m2.parameters(), strict=True))
    if all(torch.equal(a, b) for a, b in pairs):
        return Result("skipstep_vs_adamw", "PASS", f"bitwise equal to AdamW({kw}) after 25 steps")
    worst = max(float((a - b).detach().abs().max()) for a, b in pairs)
    status = "DIFF" if all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in pairs) else "FAIL"
    return Result("skipstep_vs_adamw", status, f"not bitwise vs AdamW({kw}): max |diff| {worst:.3g} after 25 steps")


def check_gate_closed(device) -> Result:
    """A closed gate with NaN gradients changes nothing, bitwise."""
    import torch

    from ..guard import SkipStepAdamW

    model = _mlp(device)
    opt = SkipStepAdamW(model.parameters(), lr=1e-3)
    for s in range(3):
        x, y = _batch(s, device)
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step(gate=torch.tensor(True, device=device))
    before = [t.clone() for t in _all_tensors(model, opt)]
    for p in model.parameters():
        p.grad = torch.full_like(p, float("nan"))
    opt.step(gate=torch.tensor(False, device=device))
    same = all(torch.equal(a, b) for a, b in zip(before, _all_tensors(model, opt), strict=True))
    return Result("skipstep_gate_closed", "PASS" if same else "FAIL",
                  "NaN gradients, gate closed: weights, moments and t unchanged" if same else "state changed")


def _all_tensors(model, opt) -> list:
    out = [p.detach() for p in model.parameters()]
    for st in opt.state.values():
        out += [v for _, v in sorted(st.items()) if hasattr(v, "clone")]
    return out


def check_snapshot(device) -> Result:
    """HostSnapshot take, train on, restore: bitwise back."""
    import torch

    from ..checkpoint.snapshot import HostSnapshot
    from ..checkpoint.state import TrainState

    model = _mlp(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    state = TrainState(model, opt)

    def train(n: int, start: int) -> None:
        for s in range(start, start + n):
            x, y = _batch(s, device)
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            state.step += 1

    train(3, 0)
    snap = HostSnapshot(state, every=1)
    snap.take()
    saved = [t.clone() for t in _all_tensors(model, opt)]
    train(3, 3)
    snap.restore()
    if device.type == "cuda":
        torch.cuda.synchronize()
    same = all(torch.equal(a, b) for a, b in zip(saved, _all_tensors(model, opt), strict=True))
    return Result("snapshot_roundtrip", "PASS" if same else "FAIL",
                  f"{snap.nbytes / 2**10:.0f} KiB host copy, restored bitwise" if same else "restore differs")


def _nccl_worker(rank: int, world: int):
    import torch

    from ..distributed.fsdp import reduce_step_stats

    torch.cuda.set_device(rank)
    p = torch.nn.Parameter(torch.ones(8, device="cuda"))
    p.grad = torch.full((8,), float(rank + 1), device="cuda")
    s = reduce_step_stats(torch.tensor(float(rank), device="cuda"), [p])
    return float(s.loss), float(s.grad_norm), bool(s.any_nonfinite)


def check_nccl(device) -> Result:
    """reduce_step_stats over NCCL on 2 GPUs."""
    import torch

    if device.type != "cuda" or torch.cuda.device_count() < 2:
        return Result("nccl_two_ranks", "SKIP", "needs 2 CUDA devices")
    from .distributed import run_distributed

    r0, r1 = run_distributed(_nccl_worker, world_size=2, backend="nccl", timeout=300)
    ok = r0 == r1 and not r0[2]
    return Result("nccl_two_ranks", "PASS" if ok else "FAIL", f"rank 0 {r0}, rank 1 {r1}")


CHECKS: dict[str, Callable] = {"hot_path_no_sync": check_hot_path, "skipstep_vs_adamw": check_skipstep_vs_adamw,
                               "skipstep_gate_closed": check_gate_closed, "snapshot_roundtrip": check_snapshot,
                               "nccl_two_ranks": check_nccl}
"""Every check by the name it reports under."""


def run_checks(device: str | None = None) -> list[Result]:
    """Run every check on ``device`` (None: CUDA if available, else everything is SKIPped)."""
    import torch

    if device is None:
        if not torch.cuda.is_available():
            return [Result(name, "SKIP", "no CUDA device") for name in CHECKS]
        device = "cuda"
    dev = torch.device(device)
    out = []
    for name, check in CHECKS.items():
        try:
            out.append(check(dev))
        except Exception as exc:  # noqa: BLE001 - a check that crashes is a FAIL with its reason
            out.append(Result(name, "FAIL", f"{type(exc).__name__}: {exc}"))
    return out


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; see the module docstring."""
    ap = argparse.ArgumentParser(prog="python -m lossguard.testing.gpu_check", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda when available)")
    args = ap.parse_args(argv)
    results = run_checks(args.device)
    for r in results:
        print(f"{r.status:4}  {r.name:22}  {r.detail}")
    return 1 if any(r.status == "FAIL" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
