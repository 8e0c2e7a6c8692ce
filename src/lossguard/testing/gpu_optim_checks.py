"""GPU self-check, the optimizer's gate: :class:`SkipStepAdamW` against torch's AdamW, a closed gate
with NaN gradients, and the guard's hot path without a host sync (:mod:`lossguard.testing.gpu_check`)."""
from __future__ import annotations

from .gpu_common import Result, all_tensors, batch, mlp, where_synced


def check_hot_path(device) -> Result:
    """Guarded steps under sync debug mode "error" (CUDA only)."""
    import torch

    from ..guard import GuardConfig, SkipStepAdamW, StabilityGuard

    if device.type != "cuda":
        return Result("hot_path_no_sync", "SKIP", "needs CUDA")
    model = mlp(device)
    guard = StabilityGuard(model, SkipStepAdamW(model.parameters(), lr=1e-3),
                           config=GuardConfig(checkpoint_every=None, stats="device", gate="device",
                                              defer_host_read=True, log_metrics=False, replay=False))
    batches = [batch(s, device) for s in range(30)]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for x, y in batches:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            guard.step(loss)
    except RuntimeError as exc:
        return Result("hot_path_no_sync", "FAIL", f"host sync in guard.step at {where_synced(exc)}: "
                      f"{str(exc).splitlines()[0]}")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    guard.flush()
    return Result("hot_path_no_sync", "PASS", f"30 steps, {guard.ledger.skips} withheld, no host sync")


def check_skipstep_vs_adamw(device) -> Result:
    """SkipStepAdamW (gate open) against torch's AdamW over healthy steps: its fused path against
    ``AdamW(fused=True)`` (bitwise expected), its per-tensor path against foreach off and on."""
    import torch

    from ..guard import SkipStepAdamW

    worst, status, notes = 0.0, "PASS", []
    gate = torch.tensor(True, device=device)
    for fused, foreach in ((True, None), (False, False), (False, True)):
        m1, m2 = mlp(device), mlp(device)
        o1 = SkipStepAdamW(m1.parameters(), lr=3e-3, weight_decay=0.1, fused=fused)
        o2 = torch.optim.AdamW(m2.parameters(), lr=3e-3, weight_decay=0.1, foreach=foreach, fused=fused or None)
        for s in range(25):
            x, y = batch(s, device)
            for m, o in ((m1, o1), (m2, o2)):
                o.zero_grad(set_to_none=True)
                torch.nn.functional.mse_loss(m(x), y).backward()
                o.step(gate=gate) if o is o1 else o.step()
        pairs = list(zip(m1.parameters(), m2.parameters(), strict=True))
        label = "fused" if fused else f"per-tensor vs foreach={foreach}"
        if all(torch.equal(a, b) for a, b in pairs):
            notes.append(f"{label} bitwise")
            continue
        diff = max(float((a - b).detach().abs().max()) for a, b in pairs)
        worst = max(worst, diff)
        notes.append(f"{label} max |diff| {diff:.3g}")
        close = all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in pairs)
        # the fused path runs torch's own kernel: anything but bitwise is a FAIL; the per-tensor
        # path may round differently from CUDA's foreach kernels (DIFF)
        status = "FAIL" if not close or fused or status == "FAIL" else "DIFF"
    return Result("skipstep_vs_adamw", status, "against AdamW after 25 steps: " + "; ".join(notes))


def check_gate_closed(device) -> Result:
    """A closed gate with NaN gradients changes nothing, bitwise."""
    import torch

    from ..guard import SkipStepAdamW

    model = mlp(device)
    opt = SkipStepAdamW(model.parameters(), lr=1e-3)
    for s in range(3):
        x, y = batch(s, device)
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step(gate=torch.tensor(True, device=device))
    before = [t.clone() for t in all_tensors(model, opt)]
    for p in model.parameters():
        p.grad = torch.full_like(p, float("nan"))
    opt.step(gate=torch.tensor(False, device=device))
    same = all(torch.equal(a, b) for a, b in zip(before, all_tensors(model, opt), strict=True))
    return Result("skipstep_gate_closed", "PASS" if same else "FAIL",
                  "NaN gradients, gate closed: weights, moments and t unchanged" if same else "state changed")
