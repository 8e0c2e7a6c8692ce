"""Hugging Face Llama-family attention is probed automatically (issue 20): the per-head largest logit
equals the logits the model really computes (rotary embeddings, grouped KV heads, Qwen3's q/k norms),
and QK-clip brings a head's largest logit to tau."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from lossguard.guard.attention_probe import find_attention  # noqa: E402
from lossguard.techniques.qk_clip import qk_clip_  # noqa: E402

SEEN: dict[int, torch.Tensor] = {}


def _capture(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """The ground truth: the q and k the model hands its attention function (after rotary)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    k = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
    s = (query @ k.transpose(-2, -1)) * scaling
    t = s.shape[-1]
    s = s.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    SEEN[module.layer_idx] = s.amax(dim=(0, 2, 3)).detach()
    return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)


def _model(family: str, kv_heads: int):
    transformers.AttentionInterface.register("lossguard_test_capture", _capture)
    cls, cfg_cls = {"llama": (transformers.LlamaForCausalLM, transformers.LlamaConfig),
                    "qwen3": (transformers.Qwen3ForCausalLM, transformers.Qwen3Config),
                    "mistral": (transformers.MistralForCausalLM, transformers.MistralConfig)}[family]
    cfg = cfg_cls(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=kv_heads, head_dim=8, max_position_embeddings=32)
    cfg._attn_implementation = "lossguard_test_capture"
    torch.manual_seed(0)
    model = cls(cfg).train()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(5)  # logits of tens, as a model whose attention logits grew
    return model


@pytest.mark.parametrize("family, kv_heads", [("llama", 2), ("llama", 4), ("qwen3", 2), ("mistral", 1)])
def test_probe_reads_the_logits_the_model_computes(family, kv_heads):
    torch.set_num_threads(1)
    model = _model(family, kv_heads)
    probes = find_attention(model, query_stride=1)  # every query: the exact maximum
    assert [(p.kind, p.n_head) for p in probes] == [("llama", 4), ("llama", 4)]
    x = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    model(input_ids=x, labels=x)
    for i, p in enumerate(probes):
        assert torch.allclose(p.head_max(), SEEN[i], rtol=1e-5), (family, i)


def test_qk_clip_brings_a_llama_head_to_tau():
    torch.set_num_threads(1)
    model = _model("llama", 4)  # one key head per query head: the clip is exact
    probes = find_attention(model, query_stride=1)  # every query: the exact maximum
    x = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    model(input_ids=x)
    heads = [p.head_max().tolist() for p in probes]
    tau = 0.5 * max(heads[0])
    done = qk_clip_(probes[:1], heads[:1], tau)
    assert done and all(c.layer == 0 for c in done)
    model(input_ids=x)  # layer 0's input is unchanged by the clip: its logits scale exactly
    after = probes[0].head_max().tolist()
    for h, m in enumerate(heads[0]):
        assert after[h] == pytest.approx(tau if m > tau else m, rel=1e-4), h


def test_qwen3_norms_leave_nothing_to_clip():
    probes = find_attention(_model("qwen3", 2))
    assert probes[0].qk_slices(0) == []  # q/k RMS norms: scaling the projections cannot reach the logits
