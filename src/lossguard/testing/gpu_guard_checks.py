"""GPU self-check, the precursor statistics: every statistic and the opt-in treatment with no host
sync, on the shipped attention, ``nn.MultiheadAttention`` and HF GPT-2 / Llama
(:mod:`lossguard.testing.gpu_check`)."""
from __future__ import annotations

from .gpu_common import Result, gpt, tokens, where_synced


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
    batches = [tokens(s, device) for s in range(steps)]
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
        return Result(name, "FAIL", f"host sync in a guarded step at {where_synced(exc)}: {str(exc).splitlines()[0]}")
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

    return _guarded_steps_no_sync("precursors_no_sync", device, gpt(device), forward)


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
