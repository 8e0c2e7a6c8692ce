"""The recomputing attention probes read one query position in four by default (session 8, their
cost): forward ``n`` reads the queries ``n % 4, n % 4 + 4, ...`` against every key, exactly; over
four training forwards every query is read; eval forwards neither measure nor turn the offset; the
growth test still sees a real model whose logits grow fast, within a turn of the offset."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from torch import nn  # noqa: E402

from lossguard.guard.attention_probe import describe, find_attention  # noqa: E402
from lossguard.guard.logit_recompute import QUERY_STRIDE  # noqa: E402
from lossguard.guard.logit_growth import LogitGrowth  # noqa: E402

T = 16
SCORES: dict[int, torch.Tensor] = {}


def _masked(s):
    return s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))


def _capture(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """Llama's ground truth: the scores of the q and k the model hands its attention function."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    k = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
    SCORES[0] = _masked((query @ k.transpose(-2, -1)) * scaling).detach()
    return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)


def _module(kind):
    """(module, forward(x), full masked scores (B, H, T, T) of x computed by hand)."""
    torch.manual_seed(0)
    if kind == "mha":
        m = nn.MultiheadAttention(32, 4, batch_first=True)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)

        def scores(x):
            w, b = m.in_proj_weight, m.in_proj_bias
            q, k = (x @ w[:32].T + b[:32]), (x @ w[32:64].T + b[32:64])
            q, k = (t.view(2, T, 4, 8).transpose(1, 2) for t in (q, k))
            return _masked((q @ k.transpose(-2, -1)) * 8 ** -0.5)
        return m, (lambda x: m(x, x, x, attn_mask=mask, need_weights=False)), scores
    if kind == "gpt2":
        from transformers.models.gpt2.modeling_gpt2 import GPT2Attention
        m = GPT2Attention(transformers.GPT2Config(n_embd=32, n_head=4, attn_pdrop=0.0, resid_pdrop=0.0), layer_idx=0)

        def scores(x):
            q, k, _ = m.c_attn(x).split(32, dim=2)
            q, k = (t.view(2, T, 4, 8).transpose(1, 2) for t in (q, k))
            return _masked((q @ k.transpose(-2, -1)) * 8 ** -0.5)
        return m, (lambda x: m(x)), scores
    transformers.AttentionInterface.register("lossguard_test_stride", _capture)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=T)
    cfg._attn_implementation = "lossguard_test_stride"
    model = transformers.LlamaForCausalLM(cfg)
    emb = model.model.embed_tokens

    def run(x):  # x: token ids here
        model(input_ids=x)

    def scores(x):
        return SCORES[0]
    return model, run, scores, emb


@pytest.mark.parametrize("kind", ["mha", "gpt2", "llama"])
def test_default_reads_every_fourth_query_at_a_turning_offset(kind):
    torch.set_num_threads(1)
    made = _module(kind)
    m, run, scores = made[:3]
    m.train()
    probes = find_attention(m)
    assert len(probes) == 1 and probes[0].query_stride == QUERY_STRIDE == 4
    # the log's header says the logged maxima are read from one query in four
    assert describe(probes)[0]["query_stride"] == 4
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 64, (2, T), generator=g) if kind == "llama" else torch.randn(2, T, 32, generator=g) * 4
    seen = []
    for n in range(2 * QUERY_STRIDE):  # e.g. the micro-batches of gradient accumulation: each one read
        run(x)
        full = scores(x)
        rows = full[:, :, n % 4::4].amax(dim=(0, 2, 3))
        assert torch.allclose(probes[0].head_max(), rows, rtol=1e-5, atol=1e-5), n
        seen.append(probes[0].head_max())
        if n == 0:  # the rows read miss the largest logit of some head: the read is a lower bound
            assert (rows < full.amax(dim=(0, 2, 3)) - 1e-4).any()
    # over four forwards every query is read: their maximum is the exact one
    assert torch.allclose(torch.stack(seen[:4]).amax(0), scores(x).amax(dim=(0, 2, 3)), rtol=1e-5, atol=1e-5)


def test_eval_forwards_neither_measure_nor_turn_the_offset():
    torch.set_num_threads(1)
    m, run, scores = _module("mha")
    probe = find_attention(m)[0]
    x = torch.randn(2, T, 32, generator=torch.Generator().manual_seed(2)) * 4
    m.train()
    run(x)
    first = probe.head_max().clone()
    m.eval()
    run(x * 3)
    assert torch.equal(probe.head_max(), first)  # an eval forward is not a training step's
    m.train()
    run(x)
    assert torch.allclose(probe.head_max(), scores(x)[:, :, 1::4].amax(dim=(0, 2, 3)), rtol=1e-5)


def _grow(query_stride: int) -> tuple[int | None, list[float]]:
    """A tiny HF GPT-2 trained on lossguard's demo prose (bytes) at a too-high LR: the step the growth
    test first fires, and the largest logit per step, read by probes with ``query_stride``."""
    from lossguard.demo.corpus import load_corpus

    data = torch.frombuffer(bytearray(load_corpus()), dtype=torch.uint8).long()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=256, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(cfg).train()
    probes = find_attention(model, query_stride=query_stride)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-2)
    growth = LogitGrowth(window=20, factor=10.0, floor=10.0)
    g = torch.Generator().manual_seed(3)
    fired, largest = None, []
    for step in range(40):
        i = torch.randint(0, len(data) - 32, (8,), generator=g).tolist()
        x = torch.stack([data[j:j + 32] for j in i])
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        largest.append(max(float(p.head_max().max()) for p in probes))
        if growth.update(step, largest[-1]) is not None and fired is None:
            fired = step
    return fired, largest


def test_growth_of_a_real_model_seen_as_with_every_query():
    torch.set_num_threads(1)
    exact_step, exact = _grow(1)
    strided_step, strided = _grow(QUERY_STRIDE)
    assert exact_step is not None  # the logits do grow here (0.1 -> 50 in 40 steps)
    # one query in four: the same growth seen, within a turn of the offset (measured: 2 steps later,
    # the largest logit crossing the test's floor of 10 there: 9.9 read against 10.7)
    assert strided_step is not None and abs(strided_step - exact_step) <= QUERY_STRIDE
    assert all(s <= e * (1 + 1e-5) for s, e in zip(strided, exact, strict=True))
