"""GPU self-check: the guard's device-side claims, checked on the machine you will train on.

Run it in one command on a machine with a CUDA device::

    python -m lossguard.testing.gpu_check            # CUDA; skips cleanly (exit 0) without one
    python -m lossguard.testing.gpu_check --device cpu   # the device-agnostic checks on the CPU

Checks (one line each: PASS, DIFF, SKIP or FAIL, with the numbers):

- ``hot_path_no_sync`` (CUDA only): 30 guarded steps of a small MLP with :class:`SkipStepAdamW`,
  device statistics and the deferred host read, under ``torch.cuda.set_sync_debug_mode("error")``:
  any host synchronisation in ``guard.step`` raises. One step's verdict is read a step late
  through a pinned buffer and an event; a FAIL names the call that synchronised.
- ``skipstep_vs_adamw``: :class:`SkipStepAdamW` with the gate open over 25 healthy steps: its fused
  path (CUDA's default: torch's kernel gated by ``found_inf``) against ``AdamW(fused=True)``, bitwise
  or FAIL; its per-tensor path against ``AdamW`` with ``foreach`` off and on: PASS if bitwise, DIFF
  (with the largest difference) if only close. All bitwise on the CPU (``tests/test_guard_gate.py``);
  on CUDA torch's foreach kernels may round differently from the per-tensor ops, hence DIFF.
- ``skipstep_gate_closed``: a closed gate with NaN gradients leaves weights, both moments and
  Adam's ``t`` bitwise unchanged.
- ``snapshot_roundtrip``: :class:`HostSnapshot` take (pinned buffers and a side stream on CUDA),
  three more steps, restore: weights and optimizer state bitwise equal to the snapshot's.
- ``precursors_no_sync``: 30 guarded steps of the shipped tiny GPT with every precursor statistic
  (attention logits per head, output logits, update ratio, Adam's ratio) and the opt-in
  :class:`PrecursorTreatment`, under sync debug mode "error" on CUDA; the statistics read once at
  the end must be finite. ``mha_precursors_no_sync``: the same on a ``torch.nn.MultiheadAttention``
  model, whose logits the probe's forward hook recomputes; ``hf_precursors_no_sync`` on Hugging
  Face's GPT-2 and Llama (rotary, grouped KV heads) built from a config (SKIP without transformers).
- ``resume_bitwise``: a :class:`CheckpointStore` save, 4 steps with dropout, a restore and the same
  4 steps again: model, AdamW state and the device RNG bitwise the straight run.
- ``sharded_fsdp2``: FSDP2 over NCCL on every GPU up to 2 (one is enough; 2 gloo ranks on the
  CPU): a sync and an async :class:`ShardedCheckpointStore` save, a CRC-verified load and a
  (pinned) :class:`HostSnapshot`, each resumed bitwise.
- ``nccl_two_ranks`` (2+ CUDA devices): :func:`reduce_step_stats` over NCCL on 2 ranks gives both
  the same global loss, grad norm and non-finite flag.

Exit code: 1 if any check FAILs, else 0. ``tests/test_gpu_check.py`` runs it in the suite.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable

from .gpu_common import Result
from .gpu_guard_checks import check_hf_precursors, check_mha_precursors, check_precursors
from .gpu_optim_checks import check_gate_closed, check_hot_path, check_skipstep_vs_adamw
from .gpu_resume_checks import check_nccl, check_resume, check_sharded, check_snapshot

__all__ = ["CHECKS", "Result", "main", "run_checks"]


CHECKS: dict[str, Callable] = {"hot_path_no_sync": check_hot_path, "skipstep_vs_adamw": check_skipstep_vs_adamw,
                               "skipstep_gate_closed": check_gate_closed, "snapshot_roundtrip": check_snapshot,
                               "precursors_no_sync": check_precursors, "mha_precursors_no_sync": check_mha_precursors,
                               "hf_precursors_no_sync": check_hf_precursors, "resume_bitwise": check_resume,
                               "sharded_fsdp2": check_sharded, "nccl_two_ranks": check_nccl}
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
