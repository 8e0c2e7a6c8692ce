"""What the sharded-checkpoint benchmarks share (``checkpoint_dcp.py``, ``checkpoint_load_cpu.py``,
``checkpoint_save_cpu.py``): the model they checkpoint, the garbage collector's clock, and the table
of CPU time against plain DCP. Imported by those scripts as a sibling (``benchmarks/`` is their
``sys.path[0]``, in the spawned ranks too)."""
from __future__ import annotations

import gc
import statistics
import time


def sharded_mlp(width: int, mesh):
    """``(model, optimizer)``: 4 ``Linear(width, width)`` layers, each and the root ``fully_shard``-ed
    on ``mesh``, seeded, after one AdamW step (so the optimizer state exists). Width 1024 is a
    48 MiB checkpoint, 2048 a 192 MiB one."""
    import torch
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)])
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(8, width)).sum().backward()
    opt.step()
    return model, opt


class GcClock:
    """Process CPU seconds spent in the garbage collector since :meth:`start` (read :attr:`seconds`):
    a full collection costs 140-180 ms in these processes and lands on one timed call or another."""

    def __init__(self) -> None:
        self.seconds, self._began = 0.0, 0.0

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.process_time()
        else:
            self.seconds += time.process_time() - self._began

    def start(self) -> None:
        gc.callbacks.append(self._on_gc)

    def stop(self) -> None:
        gc.callbacks.remove(self._on_gc)


def print_cpu_table(res: list[dict], repeat: int, what: str) -> None:
    """The markdown table of per-rank results ``{"cpu"|"wall"|"gc": {way: [seconds per repeat]}}``:
    per-rank CPU median, both ranks' CPU against ``"plain DCP"`` (paired median, with and without
    GC time), the slowest rank's wall time, and GC per call. ``what`` names the operation."""
    print(f"| {what} | CPU ms per rank (median) | CPU both ranks vs plain (paired median) | same, GC excluded "
          f"| wall ms (slowest rank) | GC ms per {what} (mean, both ranks) |")
    print("|---|---|---:|---:|---:|---:|")

    def paired(name: str, gc_out: bool) -> float:
        def work(op: str, i: int) -> float:
            return sum(r["cpu"][op][i] - (r["gc"][op][i] if gc_out else 0.0) for r in res)
        return statistics.median(work(name, i) / work("plain DCP", i) for i in range(repeat))

    for name in res[0]["cpu"]:
        per_rank = " / ".join(f"{statistics.median(r['cpu'][name]) * 1e3:.1f}" for r in res)
        slowest = statistics.median(max(r["wall"][name][i] for r in res) for i in range(repeat))
        gc_ms = sum(sum(r["gc"][name]) for r in res) / repeat * 1e3
        print(f"| {name} | {per_rank} | {paired(name, False):.3f}x | {paired(name, True):.3f}x | {slowest * 1e3:.1f} "
              f"| {gc_ms:.2f} |")


def trained_mlp(width: int):
    """``(model, optimizer)``: :func:`sharded_mlp`'s model in one process, unsharded, after one step."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(4)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(8, width)).sum().backward()
    opt.step()
    return model, opt


def base_module(src: str, name: str):
    """The module ``lossguard.checkpoint.<name>`` of another checkout's ``src``, loaded beside this
    checkout's own (``--base-src``: the code before a change, timed in the same process)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(f"lossguard.checkpoint._base_{name}",
                                                  Path(src) / f"lossguard/checkpoint/{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "lossguard.checkpoint"
    spec.loader.exec_module(module)
    return module


def time_rotating(variants: dict, repeat: int, *, warm: int, after=None) -> dict[str, list[float]]:
    """CPU seconds of each variant per repeat, the variants in rotating order, the garbage collector
    off while timing; ``after`` (untimed) runs after every call, warm-up calls included."""
    names = list(variants)
    for fn in variants.values():
        for _ in range(warm):
            fn()
            if after is not None:
                after()
    cpu: dict[str, list[float]] = {k: [] for k in names}
    gc.disable()
    try:
        for r in range(repeat):
            for k in names[r % len(names):] + names[:r % len(names)]:
                c0 = time.process_time()
                variants[k]()
                cpu[k].append(time.process_time() - c0)
                if after is not None:
                    after()
    finally:
        gc.enable()
    return cpu


def print_extra_table(cpu: dict[str, list[float]]) -> None:
    """Each variant's median CPU time and its paired median extra over the first variant's."""
    names = list(cpu)
    print("| replay | CPU ms (median) | extra over the raw file (paired median) |")
    print("|---|---:|---:|")
    for k in names:
        extra = statistics.median(a - b for a, b in zip(cpu[k], cpu[names[0]], strict=True))
        print(f"| {k} | {statistics.median(cpu[k]) * 1e3:.2f} | {extra * 1e3:+.2f} ms |")
