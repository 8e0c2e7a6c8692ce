"""Sample naming inside the Hugging Face Trainer: a tiny GPT-2 learns a cyclic token pattern; rows of
random tokens planted in the data spike the loss, and every withheld step names them (per-row
causal-LM losses of the held inputs, ids read from the batch)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow  # transformers import + two 300-step Trainer runs

from lossguard.data.skiplist import SkipList  # noqa: E402
from lossguard.guard import GuardConfig, SampleAttribution  # noqa: E402
from lossguard.guard.row_losses import causal_lm_row_loss  # noqa: E402
from lossguard.integrations.hf import StabilityCallback  # noqa: E402
from evals.planted import score_naming  # noqa: E402

N, PLANTED = 2048, (111, 999, 1500)


def _data():
    """Rows ``(s, s+1, ..., s+15) mod 64`` (a pattern the model learns), and random rows at PLANTED."""
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(0, 64, (N,), generator=g)
    rows = (starts[:, None] + torch.arange(16)[None, :]) % 64
    for i in PLANTED:
        rows[i] = torch.randint(0, 64, (16,), generator=g)
    return rows


@pytest.mark.parametrize("accumulation", [1, 2])
def test_hf_trainer_names_the_planted_rows(tmp_path, accumulation):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows = _data()
    index = {tuple(r.tolist()): i for i, r in enumerate(rows)}  # the ids, read back from a batch row
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32,
                                                                 n_layer=1, n_head=2))
    names = SampleAttribution(per_sample_loss=causal_lm_row_loss,
                              ids_of=lambda inputs: [index[tuple(r.tolist())] for r in inputs["input_ids"]])
    cb = StabilityCallback(GuardConfig(checkpoint_every=None, loss_rise=None, halt_raises=False),
                           log_path=tmp_path / "run.jsonl", store=str(tmp_path / "ck"), attribution=names,
                           restart_on_rollback=False)
    seen: list[tuple[int, list[int]]] = []

    class Record(transformers.TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            held = cb.guard._held  # the step's micro-batches, as the guard holds them
            seen.append((state.global_step, [index[tuple(r.tolist())] for b in held for r in b["input_ids"]]))

    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=300,
                                          per_device_train_batch_size=16 // accumulation,
                                          gradient_accumulation_steps=accumulation, learning_rate=1e-2,
                                          save_strategy="no",
                                          logging_strategy="no", report_to=[], use_cpu=True,
                                          dataloader_num_workers=0, disable_tqdm=True, seed=0)
    data = [{"input_ids": r, "labels": r} for r in rows]
    transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[Record(), cb]).train()
    by_step = dict(seen)
    skips = [e["step"] for e in cb.guard.events if e["event"] == "skip"]
    spikes = [(s, s, by_step[s]) for s in skips]
    score = score_naming(spikes, cb.guard.namer.records, set(PLANTED))
    if accumulation > 1:
        assert all(r.get("micro_batches") == accumulation for r in cb.guard.namer.records)
    due = len(score["caught"]) + len(score["missed"])
    print(f"hf (accumulation {accumulation}): {len(skips)} withheld, planted in them {due}, "
          f"recall {score['recall']:.2f}, precision {score['precision']:.2f}, clean-data names {score['natural']}")
    assert score["caught"] and score["recall"] >= 0.9 and score["precision_planted"] >= 0.8
    assert {k.index for k in SkipList.load(tmp_path / "ck" / "skiplist.json").keys()} >= set(score["caught"])
