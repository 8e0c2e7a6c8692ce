"""Zoo family: a small CNN classifier of teacher-labelled synthetic images (tuned)."""
from __future__ import annotations

from torch import nn

from evals.zoo import data
from evals.zoo.family import DROPOUT, Family, classify_loss, garbage_features
from evals.zoo.spec import Optim


def _model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(3),
                         nn.Flatten(), nn.Dropout(DROPOUT), nn.Linear(16 * 9, data.N_CLASSES))


FAMILY = Family(name="cnn", tuned=True, model=_model, data=data.images, loss=classify_loss,
                garbage=garbage_features, lr={Optim.ADAMW: 3e-3, Optim.SGD: 0.03},
                batch_sizes=(16, 32, 128), steps=400)
