"""The precursor statistics and their treatment inside HF Trainer and Lightning (issue 20): the same
statistics as the plain guard reach the guard's log and ``analyze``, and the QK-clip / LR cut act on
real attention modules (HF ``GPT2Attention``, ``torch.nn.MultiheadAttention``) of models that train."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from lossguard import metrics as M  # noqa: E402
from lossguard.guard import GuardConfig  # noqa: E402
from lossguard.guard.precursors import DIAGNOSTIC_EVERY  # noqa: E402
from lossguard.guard.treatment import LR_CUT_CAUSE, PrecursorTreatment, TreatmentConfig  # noqa: E402

STEPS = 12
PRECURSORS = (M.attn_layer(0), M.attn_layer(1), M.ATTN_LOGIT_MAX, M.OUTPUT_LOGIT_MAX, M.OUTPUT_LSE,
              M.UPDATE_RATIO, M.ADAM_V_RATIO)


def _records(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def _precursor_rows(recs):
    return {r["step"]: r for r in recs if M.ATTN_LOGIT_MAX in r and "event" not in r}


def _treatment():
    # tau far below these models' logits (0.05-0.4 at init): clips from the first step; the budget of
    # 2 clipping steps per window turns that into LR cuts (at most 2, at least 3 steps apart).
    return PrecursorTreatment(TreatmentConfig(tau=0.02, window=4, max_clip_steps=2, cut_gap=3, max_lr_cuts=2))


def _check_log(path, params_seen):
    """Every step has its precursors; the update ratio is the measured ||dtheta|| / ||theta|| (the
    weights taken after the guard's hook: a clip there is not part of the optimizer's update)."""
    from lossguard.analysis import analyze
    from lossguard.io import read_log

    recs = _records(path)
    rows = _precursor_rows(recs)
    assert sorted(rows) == list(range(STEPS))
    for step, r in rows.items():
        assert all(name in r for name in PRECURSORS)
        assert r[M.ATTN_LOGIT_MAX] == max(r[M.attn_layer(0)], r[M.attn_layer(1)])
        # Adam's ratio needs its state (from the first diagnostic step after step 0); the rest at once
        late = (M.ADAM_V_RATIO,) if step >= DIAGNOSTIC_EVERY else ()
        assert all(isinstance(r[n], float) and r[n] > 0 for n in PRECURSORS if n != M.ADAM_V_RATIO or late)
    for step, (before, after) in params_seen.items():
        # the denominator is taken on every DIAGNOSTIC_EVERY-th step and held between (UpdateRatio)
        held = params_seen[step - step % DIAGNOSTIC_EVERY][0]
        truth = float((after - before).norm() / held.norm())
        assert rows[step][M.UPDATE_RATIO] == pytest.approx(truth, rel=1e-4), step
    log = read_log(path)
    assert M.ATTN_LOGIT_MAX in log.series and len(log.series[M.ATTN_LOGIT_MAX].values) == STEPS
    assert any(n.startswith("Largest attention logit") for n in analyze(log).notes)
    return recs


def _check_treatment(recs, clipped):
    clips = [r for r in recs if r.get("event") == "qk_clip"]
    cuts = [r for r in recs if r.get("event") == "lr_cut" and r.get("cause") == LR_CUT_CAUSE]
    assert clips and all(r["heads"] and r["evidence"] for r in clips)
    assert len(cuts) == 2 and cuts[1]["step"] - cuts[0]["step"] >= 3
    # each clip scaled exactly its heads' W_q and W_k rows by the logged factor (framework mode:
    # at the next step's pre-optimizer hook, from the previous step's logits)
    assert clipped, "no clip was seen at a pre-optimizer hook"
    for step, ratio, head_factor in clipped:
        assert head_factor and ratio == pytest.approx(head_factor, rel=1e-5), step
    return cuts


# ---------------------------------------------------------------------------------------------- HF
def test_hf_trainer_logs_precursors_and_treats_gpt2_attention(tmp_path):
    transformers = pytest.importorskip("transformers")
    from lossguard.integrations.hf import StabilityCallback

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32,
                                                                 n_layer=2, n_head=2, bos_token_id=0,
                                                                 eos_token_id=0))
    rows = torch.randint(0, 64, (96, 16), generator=torch.Generator().manual_seed(0))
    data = [{"input_ids": r, "labels": r} for r in rows]
    attn0 = model.transformer.h[0].attn.c_attn.weight  # Conv1D (in, 3 * embed): q columns first
    cb = StabilityCallback(GuardConfig(checkpoint_every=None), log_path=tmp_path / "run.jsonl",
                           restart_on_rollback=False, treatment=_treatment())
    seen: dict[int, list] = {}
    clipped: list = []
    lrs: list[float] = []

    class Before(transformers.TrainerCallback):  # runs before the guard's callback
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            seen[state.global_step] = [attn0.detach().clone()]

    class After(transformers.TrainerCallback):  # runs after it: the clip (if any) is done
        def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
            step = state.global_step
            lrs.append(optimizer.param_groups[0]["lr"])
            _note_clip(cb.guard, step - 1, seen[step][0][:, :16], attn0.detach()[:, :16], clipped)
            seen[step].append(torch.cat([p.detach().flatten() for p in model.parameters()]).clone())

        def on_optimizer_step(self, args, state, control, **kwargs):
            seen[state.global_step].append(torch.cat([p.detach().flatten() for p in model.parameters()]))

    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=STEPS,
                                          per_device_train_batch_size=8, learning_rate=1e-2,
                                          lr_scheduler_type="constant", save_strategy="no",
                                          logging_strategy="no", report_to=[], use_cpu=True,
                                          dataloader_num_workers=0, disable_tqdm=True, seed=0)
    transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[Before(), cb, After()]).train()
    assert [p["kind"] for p in cb.guard.precursors.header()["attention"]] == ["gpt2", "gpt2"]
    recs = _check_log(tmp_path / "run.jsonl", {s: (v[1], v[2]) for s, v in seen.items()})
    cuts = _check_treatment(recs, clipped)
    # the treatment's LR cuts reach the Trainer's optimizer from the step after each
    assert lrs[cuts[0]["step"] + 1] == pytest.approx(1e-2 * cuts[0]["factor"])
    assert lrs[-1] == pytest.approx(1e-2 * cuts[1]["factor"])


def _note_clip(guard, step, before, after, clipped):
    """Record ``(step, measured factor of head 0's W_q, logged factor)`` when ``step``'s logits
    clipped head 0 of layer 0 (the clip lands at the next step's pre-optimizer hook)."""
    recs = [r for r in guard.events if r.get("event") == "qk_clip" and r["step"] == step]
    heads = [h for r in recs for h in r["heads"] if h["layer"] == 0 and h["head"] == 0]
    if heads:
        clipped.append((step, float(after.norm() / before.norm()), heads[0]["factor"]))


# ---------------------------------------------------------------------------------------- Lightning
def test_lightning_logs_precursors_and_treats_multihead_attention(tmp_path):
    pl = pytest.importorskip("lightning.pytorch")
    from lossguard.integrations.lightning import StabilityCallback

    torch.set_num_threads(1)
    torch.manual_seed(0)
    seen: dict[int, list] = {}
    clipped: list = []
    lrs: list[float] = []

    class TinyLM(pl.LightningModule):
        """Byte-level two-layer causal LM on ``torch.nn.MultiheadAttention``."""

        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(64, 32)
            self.attn = torch.nn.ModuleList(torch.nn.MultiheadAttention(32, 2, batch_first=True) for _ in range(2))
            self.lm_head = torch.nn.Linear(32, 64)

        def forward(self, x):
            h = self.emb(x)
            mask = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1], dtype=torch.bool)
            for a in self.attn:
                h = h + a(h, h, h, attn_mask=mask, need_weights=False)[0]
            return self.lm_head(h)

        def training_step(self, batch, _):
            (x,) = batch
            logits = self(x[:, :-1])
            return torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())

        def on_before_optimizer_step(self, optimizer):  # after the callbacks' hook: the clip is done
            step = self.trainer.global_step
            lrs.append(optimizer.param_groups[0]["lr"])
            w = self.attn[0].in_proj_weight.detach()
            _note_clip(cb.guard, step - 1, seen[step][0][:16], w[:16], clipped)
            seen[step].append(torch.cat([p.detach().flatten() for p in self.parameters()]).clone())

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    module = TinyLM()

    class Before(pl.Callback):  # before the guard's callback
        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            seen[trainer.global_step] = [pl_module.attn[0].in_proj_weight.detach().clone()]

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            seen[trainer.global_step - 1].append(torch.cat([p.detach().flatten() for p in pl_module.parameters()]))

    cb = StabilityCallback(GuardConfig(checkpoint_every=None), log_path=tmp_path / "run.jsonl",
                           restart_on_rollback=False, treatment=_treatment())
    x = torch.randint(0, 64, (96, 17), generator=torch.Generator().manual_seed(0))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=8)
    trainer = pl.Trainer(max_steps=STEPS, callbacks=[Before(), cb], logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, accelerator="cpu", devices=1)
    trainer.fit(module, loader)
    assert [p["kind"] for p in cb.guard.precursors.header()["attention"]] == ["mha", "mha"]
    recs = _check_log(tmp_path / "run.jsonl", {s: (v[1], v[2]) for s, v in seen.items()})
    cuts = _check_treatment(recs, clipped)
    assert lrs[cuts[0]["step"] + 1] == pytest.approx(1e-2 * cuts[0]["factor"])
    assert lrs[-1] == pytest.approx(1e-2 * cuts[1]["factor"])


def test_callbacks_take_no_precursors_by_default(tmp_path):
    pytest.importorskip("transformers")
    from lossguard.integrations.hf import StabilityCallback

    cb = StabilityCallback(log_path=tmp_path / "run.jsonl")
    assert cb.precursors is False and cb.treatment is None
    assert cb.state()["args"]["precursors"] is False  # JSON-safe: HF may rebuild the callback from it
    assert StabilityCallback(**cb.state()["args"]).precursors is False
