"""Iterating a loader without drawing from torch's global RNG: one definition for the guard's
``batches()`` and for the loops that must draw the same random numbers as it (the zoo's unguarded
twin)."""
from __future__ import annotations


def iter_rng_neutral(loader):
    """``iter(loader)`` that leaves no trace in torch's global RNG (how ``guard.batches`` iterates).

    Creating a ``DataLoader`` iterator draws its base seed from torch's global CPU generator. In a
    resumed run that draw happens right after the checkpoint's RNG state was restored, at a point
    where the run that was never interrupted drew nothing, so every later random number (each
    dropout mask) would shift: the README's loop, ``DataLoader(dataset, batch_sampler=sampler)``,
    resumed exactly in 0 of 4 SIGKILL trials (issue 10). Restoring the state around the call makes
    the draw invisible to training in every run alike (worker seeding, with ``num_workers > 0``,
    is :class:`ResumableLoader`'s business: it seeds workers from the data position).
    """
    import torch

    state = torch.get_rng_state()
    try:
        return iter(loader)
    finally:
        torch.set_rng_state(state)
