"""The guard tests' small regression task: an MLP learning a noisy linear map from 8 features,
read through a :class:`ResumableSampler`. One definition for the tests that build it; seeded, so
every caller gets the same data, data order and initial weights."""
from __future__ import annotations


def regression_task(n: int, *, batch_size: int = 16, dropout: float = 0.0):
    """``(model, sampler, loader)`` of ``n`` samples: ``Linear(8, 32) [Dropout] Tanh Linear(32, 1)``
    (torch's global RNG seeded with 0 first; dropout 0 adds no layer)."""
    import torch

    from lossguard.data.sampler import ResumableSampler

    torch.manual_seed(0)
    x = torch.randn(n, 8)
    y = x @ torch.randn(8, 1) + 0.1 * torch.randn(n, 1)
    layers = [torch.nn.Linear(8, 32), *([torch.nn.Dropout(dropout)] if dropout else []), torch.nn.Tanh(),
              torch.nn.Linear(32, 1)]
    model = torch.nn.Sequential(*layers)
    sampler = ResumableSampler(n, batch_size=batch_size, seed=0)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_sampler=sampler)
    return model, sampler, loader
