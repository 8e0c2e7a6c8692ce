"""Precursor statistics (issue 20): attention-logit maxima from three kinds of attention, output
logits, update ratio, Adam's ratio; QK-clip on each kind; the guard logging them and the treatment."""
from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from lossguard import metrics as M  # noqa: E402
from lossguard.guard.attention_probe import (AttentionProbe, find_attention, mark_attention,  # noqa: E402
                                             record_attention_logits)
from lossguard.guard.precursors import PrecursorMonitor  # noqa: E402
from lossguard.techniques.attention import CausalSelfAttention  # noqa: E402
from lossguard.techniques.qk_clip import qk_clip_  # noqa: E402


def _ref_head_max(q, k, scale, causal=True):
    s = (q @ k.transpose(-2, -1)) * scale
    if causal:
        T = s.shape[-1]
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return s.amax(dim=(0, 2, 3))


def _shipped():
    torch.manual_seed(0)
    return CausalSelfAttention(32, 4, bias=True)


def _mha():
    torch.manual_seed(0)
    return nn.MultiheadAttention(32, 4, batch_first=True)


def _gpt2():
    transformers = pytest.importorskip("transformers")
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention
    torch.manual_seed(0)
    return GPT2Attention(transformers.GPT2Config(n_embd=32, n_head=4, attn_pdrop=0.0, resid_pdrop=0.0), layer_idx=0)


def _forward(kind, m, x):
    if kind == "mha":
        T = x.shape[1]
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        return m(x, x, x, attn_mask=mask, need_weights=False)[0]
    if kind == "gpt2":
        return m(x)[0]
    return m(x)


def _reference(kind, m, x):
    """Per-head max logit computed by hand from the module's weights."""
    B, T, C = x.shape
    if kind == "shipped":
        q, k, _ = m.c_attn(x).split(C, dim=2)
    elif kind == "mha":
        w, b = m.in_proj_weight, m.in_proj_bias
        q, k = x @ w[:C].T + b[:C], x @ w[C:2 * C].T + b[C:2 * C]
    else:
        q, k, _ = m.c_attn(x).split(C, dim=2)
    q = q.view(B, T, 4, C // 4).transpose(1, 2)
    k = k.view(B, T, 4, C // 4).transpose(1, 2)
    return _ref_head_max(q, k, (C // 4) ** -0.5)


@pytest.mark.parametrize("kind,make", [("shipped", _shipped), ("mha", _mha), ("gpt2", _gpt2)])
def test_probe_reads_head_max_and_qk_clip_caps_it(kind, make):
    m = make()
    m.train()
    probe = AttentionProbe(m, "attn", query_stride=1)  # every query: the exact maximum
    assert probe.kind == kind
    x = torch.randn(2, 6, 32) * 4
    _forward(kind, m, x)
    want = _reference(kind, m, x)
    assert torch.allclose(probe.head_max(), want, rtol=1e-4, atol=1e-4)
    # QK-clip to a tau below every head's maximum: afterwards every head's maximum is tau.
    tau = float(want.detach().min()) * 0.5
    assert tau > 0
    clips = qk_clip_([probe], [want.tolist()], tau)
    assert len(clips) == 4 and all(c.factor == pytest.approx(math.sqrt(tau / c.max_logit)) for c in clips)
    _forward(kind, m, x)
    assert torch.allclose(probe.head_max(), torch.full((4,), tau), rtol=1e-4)
    probe.remove()


def test_user_attention_one_line_and_find_attention():
    class Mine(nn.Module):
        def __init__(self):
            super().__init__()
            self.n_head = 2
            self.qk = nn.Linear(8, 16)

        def forward(self, x):
            q, k = self.qk(x).view(x.shape[0], x.shape[1], 2, 2, 4).unbind(2)
            att = q.transpose(1, 2) @ k.transpose(1, 2).transpose(-2, -1) / 2.0
            record_attention_logits(self, att)  # the one line
            return att.softmax(-1)

    model = nn.Sequential(mark_attention(Mine(), n_head=2), _shipped())
    probes = find_attention(model)
    assert [p.kind for p in probes] == ["recorded", "shipped"]
    x = torch.randn(3, 5, 8)
    att = model[0](x)
    assert att.shape == (3, 2, 5, 5)
    assert probes[0].head_max().shape == (2,)
    assert probes[0].qk_slices(0) == []  # unknown layout: QK-clip leaves it alone


def test_monitor_update_ratio_adam_ratio_and_output_logits():
    from lossguard.demo.model import GPTConfig, TinyGPT
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    mon = PrecursorMonitor(model, opt, diagnostic_every=1)
    assert mon.names[:3] == [M.attn_layer(0), M.attn_layer(1), M.ATTN_LOGIT_MAX]
    x = torch.randint(0, 256, (4, 8))
    for _ in range(3):
        logits, loss = model(x, x)
        loss.backward()
        mon.before_step()
        g2 = sum(float(p.grad.square().sum()) for p in model.parameters())
        v = sum(float(opt.state[p]["exp_avg_sq"].sum()) for p in model.parameters() if p in opt.state)
        before = [p.detach().clone() for p in model.parameters()]
        opt.step()
        mon.after_step()
        opt.zero_grad()
    stats = mon.read()
    pairs = zip(model.parameters(), before, strict=True)
    num = math.sqrt(sum(float((p.detach() - b).square().sum()) for p, b in pairs))
    den = math.sqrt(sum(float(b.square().sum()) for b in before))
    assert stats[M.UPDATE_RATIO] == pytest.approx(num / den, rel=1e-4)
    assert stats[M.ADAM_V_RATIO] == pytest.approx(g2 / v, rel=1e-4)
    assert stats[M.OUTPUT_LOGIT_MAX] == pytest.approx(float(logits.abs().max()), rel=1e-5)
    from lossguard.guard.precursors import LSE_STRIDE
    rows = logits.detach().reshape(-1, logits.shape[-1])[::LSE_STRIDE]
    assert stats[M.OUTPUT_LSE] == pytest.approx(float(torch.logsumexp(rows, -1).mean()), rel=1e-5)
    assert stats[M.ATTN_LOGIT_MAX] == pytest.approx(max(stats[M.attn_layer(0)], stats[M.attn_layer(1)]))


def _guarded(tmp_path, treatment, lr=0.05, steps=40, stats="auto"):
    from lossguard.guard import GuardConfig, StabilityGuard
    from lossguard.demo.model import GPTConfig, TinyGPT
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    log = tmp_path / "run.jsonl"
    guard = StabilityGuard(model, opt, config=GuardConfig(max_grad_norm=1.0, stats=stats), log_path=log,
                           precursors=True, treatment=treatment)
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 256, (4, 9), generator=g) for _ in range(steps)]
    for _step, b in guard.batches(batches, steps=steps):
        _, loss = model(b[:, :-1], b[:, 1:])
        loss.backward()
        guard.step(loss)
    guard.close()
    return guard, [json.loads(x) for x in log.read_text().splitlines()]


@pytest.mark.parametrize("stats", ["host", "device"])
def test_guard_logs_precursors(tmp_path, stats):
    _, recs = _guarded(tmp_path, None, stats=stats)
    metrics = [r for r in recs if "loss" in r]
    assert len(metrics) == 40
    for name in (M.ATTN_LOGIT_MAX, M.OUTPUT_LSE, M.UPDATE_RATIO, M.attn_layer(1)):
        assert all(name in r for r in metrics)
    assert all(isinstance(r[M.UPDATE_RATIO], float) and 0 < r[M.UPDATE_RATIO] < 1 for r in metrics)
    from lossguard.io import read_log
    log = read_log(tmp_path / "run.jsonl")
    assert M.ATTN_LOGIT_MAX in log.series and M.UPDATE_RATIO in log.series


def test_treatment_clips_with_evidence_and_bounds_its_lr_cuts(tmp_path):
    from lossguard.guard.treatment import LR_CUT_CAUSE, PrecursorTreatment, TreatmentConfig
    # tau far below this model's logits: it would clip every step; the budget turns that into LR cuts.
    treat = PrecursorTreatment(TreatmentConfig(tau=0.05, window=10, max_clip_steps=3, max_lr_cuts=2))
    guard, recs = _guarded(tmp_path, treat)
    clips = [r for r in recs if r.get("event") == "qk_clip"]
    cuts = [r for r in recs if r.get("event") == "lr_cut" and r.get("cause") == LR_CUT_CAUSE]
    assert clips and all("evidence" in r and r["heads"] and r["reasons"] == [r["evidence"]] for r in clips)
    assert len(cuts) == 2 and cuts[1]["step"] - cuts[0]["step"] >= 10  # bounded and spaced
    assert guard.ledger.lr_factor(39) == pytest.approx(0.25)
    # at most max_clip_steps clipping steps in any window of 10 steps at one LR (each cut opens a
    # fresh budget): (max_lr_cuts + 1) * max_clip_steps in any window
    steps = [r["step"] for r in clips]
    assert all(sum(1 for t in steps if s <= t < s + 10) <= 3 * 3 for s in steps)
    first = cuts[0]["step"]
    assert sum(1 for t in steps if t <= first) <= 3  # before the first cut: the plain budget
    metrics = [r for r in recs if "lr" in r and "loss" in r]
    assert metrics[-1]["lr"] == pytest.approx(0.05 * 0.25)


def test_treatment_does_nothing_below_tau(tmp_path):
    from lossguard.guard.treatment import PrecursorTreatment, TreatmentConfig
    # the level test alone (this tiny model's logits grow >10x in 20 steps at LR 0.05: the growth
    # test would cut, tests/test_logit_growth.py)
    _, recs = _guarded(tmp_path, PrecursorTreatment(TreatmentConfig(tau=1e6, growth_factor=None)))
    assert not [r for r in recs if r.get("event")]


def test_analyze_reads_the_precursors_of_a_guard_log(tmp_path):
    from lossguard.analysis import analyze
    from lossguard.io import read_log
    _guarded(tmp_path, None)
    notes = analyze(read_log(tmp_path / "run.jsonl")).notes
    assert any(n.startswith("Largest attention logit") for n in notes)
    assert any(n.startswith("Update-to-weight ratio") for n in notes)
    assert any("log Z" in n for n in notes) and any("second moment" in n for n in notes)


def test_update_size_test_sees_an_lr_jump_and_cuts_it_back(tmp_path):
    from lossguard.guard import GuardConfig, StabilityGuard
    from lossguard.guard.update_size import LR_CUT_CAUSE, UpdateSizeTest
    from lossguard.demo.model import GPTConfig, TinyGPT

    def train(jump: float):
        torch.manual_seed(0)
        model = TinyGPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: jump if s >= 60 else 1.0)
        log = tmp_path / f"j{jump}.jsonl"
        guard = StabilityGuard(model, opt, scheduler=sched, config=GuardConfig(max_grad_norm=1.0), log_path=log,
                               treatment=UpdateSizeTest())
        g = torch.Generator().manual_seed(0)
        batches = [torch.randint(0, 256, (4, 9), generator=g) for _ in range(90)]
        for _, b in guard.batches(batches, steps=90):
            _, loss = model(b[:, :-1], b[:, 1:])
            loss.backward()
            guard.step(loss)
        guard.close()
        return guard, [json.loads(x) for x in log.read_text().splitlines()]

    guard, recs = train(20.0)
    cuts = [r for r in recs if r.get("event") == "lr_cut" and r.get("cause") == LR_CUT_CAUSE]
    assert len(cuts) == 1 and cuts[0]["step"] == 60  # the LR jumped too: the first jumped step confirms
    assert "jumped" in cuts[0]["evidence"] and cuts[0]["factor"] == pytest.approx(1 / 20)  # no store: the cut alone
    assert guard.ledger.lr_factor(80) == pytest.approx(cuts[0]["factor"])
    _, recs = train(1.0)  # no jump: no action
    assert not [r for r in recs if r.get("event") == "lr_cut"]


def _monitored_run(*, diagnostic_every: int, n: int):
    """A 1-layer TinyGPT with its AdamW under a :class:`PrecursorMonitor`, and a generator of ``n``
    monitored steps on seeded byte batches (each yields its logits, after the optimizer step)."""
    from lossguard.demo.model import GPTConfig, TinyGPT
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    mon = PrecursorMonitor(model, opt, diagnostic_every=diagnostic_every)

    def steps():
        for i in range(n):
            x = torch.randint(0, 256, (4, 8), generator=torch.Generator().manual_seed(i))
            logits, loss = model(x, x)
            loss.backward()
            mon.before_step()
            opt.step()
            mon.after_step()
            opt.zero_grad()
            yield logits
    return mon, steps()


def test_diagnostics_measured_every_kth_step_and_held_between():
    """Output logits and Adam's ratio on steps 0, 2, 4 (diagnostic_every=2), held on 1, 3; the
    update ratio changes every step."""
    mon, steps = _monitored_run(diagnostic_every=2, n=5)
    seen = [(mon.read(), float(logits.detach().abs().max())) for logits in steps]
    for i, (stats, out_max) in enumerate(seen):
        if i % 2 == 0:
            assert stats[M.OUTPUT_LOGIT_MAX] == pytest.approx(out_max, rel=1e-5)
        else:  # held from the step before
            assert stats[M.OUTPUT_LOGIT_MAX] == seen[i - 1][0][M.OUTPUT_LOGIT_MAX] != pytest.approx(out_max)
            a, b = stats[M.ADAM_V_RATIO], seen[i - 1][0][M.ADAM_V_RATIO]
            assert a == b or math.isnan(a) and math.isnan(b)
    assert math.isnan(seen[0][0][M.ADAM_V_RATIO])  # no second moment before the first step
    assert seen[2][0][M.ADAM_V_RATIO] != seen[1][0][M.ADAM_V_RATIO]
    ratios = [s[M.UPDATE_RATIO] for s, _ in seen]
    assert len(set(ratios)) == 5 and all(r > 0 for r in ratios)


def test_packed_is_a_fresh_tensor_that_later_steps_do_not_overwrite():
    """The scalars live in one buffer written in place every step; packed() must hand out a copy,
    because a deferred read (framework mode, CUDA) may still hold the last step's tensor."""
    mon, steps = _monitored_run(diagnostic_every=1, n=3)
    held = []
    for _ in steps:
        p = mon.packed()
        held.append((p, p.tolist()))
    assert all(str(p.tolist()) == str(v) for p, v in held)  # as read then, after two more steps (NaN-safe)
    assert held[1][1] != held[2][1] and len(held[2][1]) == mon.packed_length()


def test_treatment_budgets_travel_in_the_guards_checkpointed_state(tmp_path):
    """A resume restores how often each responder may still act (issue 20): the QK-clip budget and
    LR-cut count of the treatment, the window and cut count of the update-size test."""
    from lossguard.guard import StabilityGuard
    from lossguard.guard.treatment import PrecursorTreatment, TreatmentConfig
    from lossguard.guard.update_size import UpdateSizeConfig, UpdateSizeTest
    from lossguard.demo.model import GPTConfig, TinyGPT
    treat = PrecursorTreatment(TreatmentConfig(tau=0.05, window=10, max_clip_steps=3, max_lr_cuts=2))
    size = UpdateSizeTest(UpdateSizeConfig(window=8, min_points=8))
    guard, _ = _guarded(tmp_path, [treat, size])
    sd = json.loads(json.dumps(guard.state_dict()))  # JSON-safe, as checkpoints keep it
    assert sd["treatment"][0]["lr_cuts"] == 2 and sd["treatment"][0]["clip_steps"]
    assert len(sd["treatment"][1]["hist"]) == 8
    model = TinyGPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=8))
    fresh_treat, fresh_size = PrecursorTreatment(treat.config), UpdateSizeTest(size.config)
    other = StabilityGuard(model, torch.optim.AdamW(model.parameters()), precursors=True,
                           treatment=[fresh_treat, fresh_size], log_path=tmp_path / "other.jsonl")
    other.load_state_dict(sd)
    assert fresh_treat.state_dict() == treat.state_dict() and fresh_size.state_dict() == size.state_dict()
    assert fresh_treat.lr_cuts == 2  # no LR cut left to make after the resume
    # a rollback to an older checkpoint restores the windows, not the budget: cuts made stay made
    older = {**sd["treatment"][0], "lr_cuts": 0, "lr_factor": 1.0, "last_cut": None, "clip_steps": []}
    fresh_treat.load_state_dict(older)
    assert fresh_treat.lr_cuts == 2 and fresh_treat.lr_factor == treat.lr_factor and not fresh_treat._clip_steps
    fresh_size.load_state_dict({**sd["treatment"][1], "cuts": 0, "factor": 1.0, "hist": []})
    assert fresh_size.cuts == size.cuts and not fresh_size._hist
    other.close()
