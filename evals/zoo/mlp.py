"""Zoo family: an MLP classifier of teacher-labelled Gaussian vectors (tuned)."""
from __future__ import annotations

from torch import nn

from evals.zoo import data
from evals.zoo.family import DROPOUT, Family, classify_loss, garbage_features
from evals.zoo.spec import Optim


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Dropout(DROPOUT),
                         nn.Linear(64, 64), nn.GELU(), nn.Dropout(DROPOUT), nn.Linear(64, data.N_CLASSES))


FAMILY = Family(name="mlp", tuned=True, model=_model, data=data.vectors, loss=classify_loss,
                garbage=garbage_features, lr={Optim.ADAMW: 3e-3, Optim.SGD: 0.05},
                batch_sizes=(16, 32, 128), steps=600)
