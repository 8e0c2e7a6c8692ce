"""The precursor statistics on a GPU: no host sync per step, and their host-side cost (issue 20).

On CUDA the statistics are device tensors and the guard reads them in its one deferred transfer per
step, so the monitor's per-step path should never wait for the device. This runs the natural-instability
benchmark's TinyGPT (``--shape mild`` and ``outside``, as ``precursor_overhead.py``) on one CUDA
device and checks it two ways:

* ``guarded``: ``StabilityGuard(precursors=True, treatment=PrecursorTreatment())`` with device
  statistics, the device gate and the deferred host read, ``--steps`` steps under
  ``torch.cuda.set_sync_debug_mode("error")``: any synchronising call in forward, backward or
  ``guard.step`` (the monitor's ``before_step`` / ``after_step`` / ``packed`` included) raises,
  and the run reports FAIL with the call;
* ``monitor``: the monitor alone around plain AdamW steps under the same mode (its packed tensor
  copied to pinned host memory without blocking, the copy of step t read at step t + 1 after an
  event query has said it is done), and the host CPU time inside its calls against a plain step's.

    python benchmarks/precursor_gpu.py --steps 200
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import traceback

import torch

from lossguard.demo.model import GPTConfig, TinyGPT
from lossguard.guard import GuardConfig, SkipStepAdamW, StabilityGuard
from lossguard.guard.precursors import PrecursorMonitor
from lossguard.guard.treatment import PrecursorTreatment

SHAPES = {"mild": {"n_layer": 3, "n_head": 4, "n_embd": 64, "batch": 16, "seq": 64},
          "outside": {"n_layer": 4, "n_head": 3, "n_embd": 96, "batch": 8, "seq": 128}}
"""As ``precursor_overhead.py``'s."""


def _model(shape: dict, device):
    torch.manual_seed(0)
    return TinyGPT(GPTConfig(n_layer=shape["n_layer"], n_head=shape["n_head"], n_embd=shape["n_embd"],
                             block_size=shape["seq"])).to(device)


def _batches(shape: dict, n: int, device):
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 256, (shape["batch"], shape["seq"]), generator=g).to(device) for _ in range(n)]


def _where(exc: BaseException) -> str:
    """The innermost frames of ``exc`` outside torch (which call synchronised)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/torch/" not in f.filename]
    return " <- ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}" for f in reversed(frames[-3:]))


@contextlib.contextmanager
def _no_sync(device, warmup: int = 0):
    """Yields a function to call at the start of each step: from step ``warmup`` on, any
    synchronising CUDA call raises (on the CPU: nothing to check, a smoke run)."""
    seen = [0]

    def tick() -> None:
        if seen[0] == warmup and device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
        seen[0] += 1

    try:
        yield tick
    finally:
        if device.type == "cuda":
            torch.cuda.set_sync_debug_mode("default")


def guarded(shape: dict, steps: int, device, warmup: int) -> str:
    """The guard with precursors and the treatment under sync debug mode "error"."""
    model = _model(shape, device)
    opt = SkipStepAdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))  # the device gate's optimizer
    guard = StabilityGuard(model, opt, config=GuardConfig(checkpoint_every=None, stats="device", gate="device",
                                                          defer_host_read=True, log_metrics=False, replay=False),
                           treatment=PrecursorTreatment())
    batches = _batches(shape, steps, device)
    try:
        with _no_sync(device, warmup) as tick:
            for x in batches:
                tick()
                _, loss = model(x, x)
                loss.backward()
                guard.step(loss)
    except RuntimeError as exc:
        return f"FAIL: host sync: {str(exc).splitlines()[0]} at {_where(exc)}"
    guard.flush()
    return f"PASS: {steps} guarded steps with precursors + treatment, no host sync"


def monitor(shape: dict, steps: int, device, warmup: int) -> str:
    """The monitor alone under sync debug mode "error", and its host time against a plain step's."""
    model = _model(shape, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    mon = PrecursorMonitor(model, opt)
    cuda = device.type == "cuda"
    host = torch.empty(mon.packed_length(), pin_memory=cuda)
    step_t, inside_t, read, landed = [], [], 0, None
    try:
        with _no_sync(device, warmup) as tick:
            for x in _batches(shape, steps, device):
                tick()
                t0 = time.thread_time()
                _, loss = model(x, x)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                c = time.thread_time()
                mon.before_step()
                inside = time.thread_time() - c
                opt.step()
                c = time.thread_time()
                mon.after_step()
                if landed is None or not cuda or landed.query():  # last step's copy is in: read it, no wait
                    if landed is not None:
                        mon.decode(host.tolist())
                        read += 1
                    host.copy_(mon.packed(), non_blocking=cuda)
                    landed = torch.cuda.Event() if cuda else True
                    if cuda:
                        landed.record()
                inside += time.thread_time() - c
                opt.zero_grad(set_to_none=True)
                step_t.append(time.thread_time() - t0 - inside)
                inside_t.append(inside)
    except RuntimeError as exc:
        return f"FAIL: host sync: {str(exc).splitlines()[0]} at {_where(exc)}"
    if cuda:
        torch.cuda.synchronize()
    k = len(step_t) // 5  # the first fifth warms up
    plain, own = statistics.median(step_t[k:]), statistics.median(inside_t[k:])
    return (f"PASS: {steps} steps, no host sync ({read} reads without waiting); host CPU inside the monitor "
            f"{own * 1e3:.3f} ms against {plain * 1e3:.2f} ms for the rest of the step ({100 * own / plain:.2f}%)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=0, help="steps before the check starts (0: from the first)")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of the same code (no sync to check)")
    a = ap.parse_args(argv)
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 0
    print(torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", torch.__version__)
    bad = 0
    if device.type == "cuda":  # the check can fail: the packed read done the blocking way must raise
        mon = PrecursorMonitor(_model(SHAPES["mild"], device))
        try:
            with _no_sync(device) as tick:
                tick()
                mon.packed().tolist()
            print("control: FAIL: a blocking read of the packed tensor did not raise")
            bad += 1
        except RuntimeError:
            print("control: PASS: a blocking read of the packed tensor raises under the same mode")
    for name, shape in SHAPES.items():
        for kind, fn in (("guarded", guarded), ("monitor", monitor)):
            line = fn(shape, a.steps, device, a.warmup)
            bad += line.startswith("FAIL")
            print(f"{name} {kind} (checked from step {a.warmup}): {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
