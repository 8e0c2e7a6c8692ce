"""Zoo family: lossguard's tiny byte-level GPT (narrower than the demo's) on the demo corpus (tuned)."""
from __future__ import annotations

from evals.zoo import data
from evals.zoo.family import DROPOUT, Family, garbage_tokens
from evals.zoo.spec import Optim

LENGTH = 32


def _model():
    from lossguard.demo.model import GPTConfig, TinyGPT

    return TinyGPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=LENGTH, dropout=DROPOUT))


def _loss(model, batch):
    x, y = batch
    return model(x, y)[1]


FAMILY = Family(name="gpt", tuned=True, model=_model, data=lambda: data.corpus(length=LENGTH), loss=_loss,
                garbage=garbage_tokens(256), lr={Optim.ADAMW: 3e-3, Optim.SGD: 0.3},
                batch_sizes=(8, 16, 32), steps=400)
