"""Resumable data: exact position, O(1) skips, sample provenance (ResumableSampler, ResumableLoader).

Importing this package does not import torch; ResumableLoader and the StatefulDataLoader helpers do
when they are used.
"""
from .loader import ResumableLoader
from .sampler import ResumableSampler

__all__ = ["ResumableLoader", "ResumableSampler"]
