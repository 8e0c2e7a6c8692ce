"""Resumable data: exact position, O(1) skips, sample provenance (ResumableSampler, ResumableLoader).

Importing this package does not import torch; ResumableLoader and the StatefulDataLoader helpers do
when they are used.
"""
from .loader import ResumableLoader
from .sample_ids import DatasetMix, SampleKey, StepSamples, step_samples
from .sampler import ResumableSampler
from .skiplist import SkipList

__all__ = ["DatasetMix", "ResumableLoader", "ResumableSampler", "SampleKey", "SkipList", "StepSamples", "step_samples"]
