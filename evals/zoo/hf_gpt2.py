"""Zoo family: an HF GPT-2 (tiny ``GPT2Config``, built from the config, no hub) under
``transformers.Trainer`` with lossguard's HF ``StabilityCallback`` (HELD OUT of all guard tuning)."""
from __future__ import annotations

from evals.zoo import data
from evals.zoo.family import DROPOUT, Family, Trainer, garbage_tokens
from evals.zoo.spec import Optim

LENGTH = 32


def _model():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=256, n_positions=LENGTH, n_embd=32, n_layer=2, n_head=2,
                     resid_pdrop=DROPOUT, embd_pdrop=DROPOUT, attn_pdrop=DROPOUT)
    return GPT2LMHeadModel(cfg)


def _loss(model, batch):
    x, _ = batch
    return model(input_ids=x, labels=x).loss  # GPT-2 shifts the labels itself


FAMILY = Family(name="hf_gpt2", tuned=False, model=_model, data=lambda: data.corpus(length=LENGTH), loss=_loss,
                garbage=garbage_tokens(256), lr={Optim.ADAMW: 3e-3, Optim.SGD: 0.3},
                batch_sizes=(8, 16, 32), steps=400, trainer=Trainer.HF)
