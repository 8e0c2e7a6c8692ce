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
  (default, non-capturable; ``foreach`` off and on) over 25 healthy steps: PASS if bitwise equal,
  DIFF (with the largest difference) if only close. Bitwise on the CPU (``tests/test_guard_gate.py``);
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
from dataclasses import dataclass
from typing import Callable


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
    """SkipStepAdamW (gate open) against torch's AdamW (foreach off and on) over healthy steps."""
    import torch

    from ..guard import SkipStepAdamW

    worst, status = 0.0, "PASS"
    gate = torch.tensor(True, device=device)
    for foreach in (False, True):
        m1, m2 = _mlp(device), _mlp(device)
        o1 = SkipStepAdamW(m1.parameters(), lr=3e-3, weight_decay=0.1)
        o2 = torch.optim.AdamW(m2.parameters(), lr=3e-3, weight_decay=0.1, foreach=foreach)
        for s in range(25):
            x, y = _batch(s, device)
            for m, o in ((m1, o1), (m2, o2)):
                o.zero_grad(set_to_none=True)
                torch.nn.functional.mse_loss(m(x), y).backward()
                o.step(gate=gate) if o is o1 else o.step()
        pairs = list(zip(m1.parameters(), m2.parameters(), strict=True))
        if all(torch.equal(a, b) for a, b in pairs):
            continue
        worst = max(worst, *(float((a - b).detach().abs().max()) for a, b in pairs))
        close = all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in pairs)
        status = "FAIL" if not close or status == "FAIL" else "DIFF"
    if status == "PASS":
        return Result("skipstep_vs_adamw", "PASS", "bitwise equal to AdamW (foreach off and on) after 25 steps")
    return Result("skipstep_vs_adamw", status, f"not bitwise vs AdamW: max |diff| {worst:.3g} after 25 steps")


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


def _gpt(device, seed: int = 0, dropout: float = 0.0):
    import torch

    from ..demo.model import GPTConfig, TinyGPT

    torch.manual_seed(seed)
    return TinyGPT(GPTConfig(n_layer=2, n_head=4, n_embd=64, block_size=32, dropout=dropout)).to(device)


def _tokens(step: int, device):
    import torch

    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randint(0, 256, (8, 32), generator=g)
    return x.to(device), x.roll(-1, dims=1).to(device)


class _MHANet:
    """A model whose attention is ``torch.nn.MultiheadAttention`` (probed by a forward hook)."""

    @staticmethod
    def build(device):
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.emb = nn.Embedding(256, 64)
                self.attn = nn.MultiheadAttention(64, 4, batch_first=True)
                self.out = nn.Linear(64, 256)

            def forward(self, x):
                h = self.emb(x)
                mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).triu(1)
                a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
                return self.out(h + a)

        torch.manual_seed(0)
        return Net().to(device)


def _guarded_steps_no_sync(name: str, device, model, forward, steps: int = 30) -> Result:
    """``steps`` guarded steps with every precursor statistic and the opt-in treatment, under sync
    debug mode "error" on CUDA (on the CPU, where nothing syncs, the same steps without it); then the
    statistics read once and checked to be finite."""
    import math

    import torch

    from ..guard import GuardConfig, SkipStepAdamW, StabilityGuard
    from ..guard.treatment import PrecursorTreatment

    guard = StabilityGuard(model, SkipStepAdamW(model.parameters(), lr=1e-3),
                           config=GuardConfig(checkpoint_every=None, stats="device", gate="device",
                                              defer_host_read=True, log_metrics=False, replay=False),
                           precursors=True, treatment=PrecursorTreatment())
    batches = [_tokens(s, device) for s in range(steps)]
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()  # the model's build and the batches' copies are not the guard's
        torch.cuda.set_sync_debug_mode("error")
    try:
        for x, y in batches:
            loss = forward(model, x, y)
            loss.backward()
            guard.step(loss)
    except RuntimeError as exc:
        return Result(name, "FAIL", f"host sync in a guarded step: {str(exc).splitlines()[0]}")
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
    guard.flush()
    values = guard.precursors.read()
    attn = values.get("attn_logit_max", float("nan"))
    bad = sorted(k for k, v in values.items() if not math.isfinite(v))
    if not math.isfinite(attn) or bad:
        return Result(name, "FAIL", f"statistics not finite after {steps} steps: {bad or ['attn_logit_max']}")
    return Result(name, "PASS", f"{steps} steps, {len(values)} statistics (largest attention logit "
                  f"{attn:.2f}), " + ("no host sync" if cuda else "finite (the host-sync check needs CUDA)"))


def check_precursors(device) -> Result:
    """The precursor statistics and the treatment on the shipped attention, with no host sync (CUDA)."""
    def forward(model, x, y):
        return model(x, y)[1]

    return _guarded_steps_no_sync("precursors_no_sync", device, _gpt(device), forward)


def check_mha_precursors(device) -> Result:
    """The same on ``torch.nn.MultiheadAttention``, whose logits a forward hook recomputes."""
    import torch.nn.functional as F

    def forward(model, x, y):
        return F.cross_entropy(model(x).flatten(0, 1), y.flatten())

    return _guarded_steps_no_sync("mha_precursors_no_sync", device, _MHANet.build(device), forward)


def check_hf_precursors(device) -> Result:
    """The same on Hugging Face's GPT-2 and Llama attention (forward hooks; rotary, grouped KV heads)."""
    import torch
    import torch.nn.functional as F

    try:
        import transformers
    except ImportError:
        return Result("hf_precursors_no_sync", "SKIP", "transformers is not installed")

    def forward(model, x, y):
        return F.cross_entropy(model(input_ids=x).logits.flatten(0, 1).float(), y.flatten())

    builds = {"GPT2LMHeadModel": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
                  vocab_size=256, n_positions=32, n_embd=64, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)),
              "LlamaForCausalLM": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
                  vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32))}
    details = []
    for name, build in builds.items():
        torch.manual_seed(0)
        model = build().to(device)
        got = _guarded_steps_no_sync("hf_precursors_no_sync", device, model, forward, steps=12)
        if got.status != "PASS":
            return Result(got.name, got.status, f"{name}: {got.detail}")
        details.append(f"{name} {got.detail.split(' (')[1].split(')')[0]}")
    return Result("hf_precursors_no_sync", "PASS", "; ".join(details) + (", no host sync" if device.type == "cuda"
                                                                          else ", finite"))


def check_resume(device) -> Result:
    """Save, train on, restore, train the same steps again: bitwise the same (model, AdamW state,
    and the device RNG that dropout draws from)."""
    import tempfile

    import torch

    from ..checkpoint import CheckpointStore
    from ..checkpoint.state import TrainState

    model = _gpt(device, dropout=0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    state = TrainState(model, opt)

    def train(n: int) -> None:
        for _ in range(n):
            x, y = _tokens(state.step, device)
            opt.zero_grad(set_to_none=True)
            model(x, y)[1].backward()
            opt.step()
            state.step += 1

    with tempfile.TemporaryDirectory() as tmp:
        store = CheckpointStore(tmp)
        train(3)
        state.save(store)
        train(4)
        straight = [t.clone() for t in _all_tensors(model, opt)]
        state.restore(store, 3)
        train(4)
    same = all(torch.equal(a, b) for a, b in zip(straight, _all_tensors(model, opt), strict=True))
    return Result("resume_bitwise", "PASS" if same else "FAIL",
                  "restored at step 3, 4 steps with dropout: bitwise the straight run" if same
                  else "the resumed steps differ from the straight run")


def _sharded_worker(rank: int, world: int, tmp: str, device_type: str):
    import torch
    from torch.distributed.fsdp import fully_shard

    from ..checkpoint import HostSnapshot, ShardedCheckpointStore, ShardedTrainState

    if device_type == "cuda":
        torch.cuda.set_device(rank)
    device = torch.device(f"cuda:{rank}") if device_type == "cuda" else torch.device(device_type)
    model = _gpt(device)
    for block in model.h:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    state = ShardedTrainState(model, opt)

    def train(n: int) -> None:
        for _ in range(n):
            x, y = _tokens(state.step, device)
            opt.zero_grad(set_to_none=True)
            model(x, y)[1].backward()
            opt.step()
            state.step += 1

    def local() -> list:
        from ..checkpoint.snapshot import _local

        out = [_local(v).clone() for v in model.state_dict().values()]
        for st in opt.state.values():
            out += [_local(v).clone() for _, v in sorted(st.items()) if torch.is_tensor(v)]
        return out

    store = ShardedCheckpointStore(tmp, keep_last=3, async_saves=True)
    train(3)
    state.save(store)                  # step 3, sync
    snap = HostSnapshot(state, every=3)
    snap.maybe_take(state.step)        # step 3, pinned host copy
    train(3)
    state.async_save(store).wait()     # step 6, async
    train(3)
    straight = local()
    results = []
    state.restore(store, 6)
    train(3)
    results.append(all(torch.equal(a, b) for a, b in zip(straight, local(), strict=True)))
    snap.restore()
    train(6)
    results.append(all(torch.equal(a, b) for a, b in zip(straight, local(), strict=True)))
    return results


def check_sharded(device) -> Result:
    """FSDP2 over NCCL (one rank per GPU, one GPU is enough; 2 gloo ranks on the CPU): a sync and an
    async sharded save, a verified load and a (pinned, on CUDA) host snapshot, each resumed bitwise."""
    import tempfile

    import torch

    from .distributed import run_distributed

    cuda = device.type == "cuda"
    world = min(2, torch.cuda.device_count()) if cuda else 2
    with tempfile.TemporaryDirectory() as tmp:
        per_rank = run_distributed(_sharded_worker, world_size=world, args=(tmp, device.type),
                                   backend="nccl" if cuda else "gloo", timeout=300)
    disk, memory = (all(r[i] for r in per_rank) for i in (0, 1))
    ok = disk and memory
    return Result("sharded_fsdp2", "PASS" if ok else "FAIL",
                  f"{world} rank(s) over {'NCCL' if cuda else 'gloo'}: from disk {'bitwise' if disk else 'DIFFERS'}, "
                  f"from the {'pinned ' if cuda else ''}host snapshot {'bitwise' if memory else 'DIFFERS'}")


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
